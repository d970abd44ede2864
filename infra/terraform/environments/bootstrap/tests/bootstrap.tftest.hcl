# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the bootstrap stack makes the state backend
# and prints the settings every environment's `terraform init
# -backend-config=` takes. Plans only: the bucket and table refuse a destroy.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "123456789012"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

# the key's ARN is known only once KMS made it: given, so that the plan shows
# the whole file
override_resource {
  target          = module.state_backend.aws_kms_key.state
  override_during = plan
  values = {
    arn = "arn:aws:kms:eu-central-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
  }
}

variables {
  bucket = "samsa-terraform-state-123456789012"
  region = "eu-central-1"
}

run "backend_hcl_names_the_bucket_table_and_region_the_stack_makes" {
  command = plan

  assert {
    condition     = module.state_backend.bucket == "samsa-terraform-state-123456789012" && module.state_backend.lock_table == "samsa-terraform-locks"
    error_message = "the stack makes the bucket and the lock table it is given"
  }
  assert {
    condition     = strcontains(output.backend_hcl, "bucket         = \"samsa-terraform-state-123456789012\"\n")
    error_message = "backend.hcl names the state bucket"
  }
  assert {
    condition     = strcontains(output.backend_hcl, "dynamodb_table = \"samsa-terraform-locks\"\n")
    error_message = "backend.hcl names the lock table: every plan and apply of an environment takes its lock there"
  }
  assert {
    condition     = strcontains(output.backend_hcl, "region         = \"eu-central-1\"\n") && strcontains(output.backend_hcl, "encrypt        = true\n")
    error_message = "backend.hcl names the bucket's region and asks for encryption"
  }
  assert {
    condition     = strcontains(output.backend_hcl, "kms_key_id     = \"arn:aws:kms:eu-central-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\"\n")
    error_message = "backend.hcl names the stack's key: states are written encrypted with it"
  }
  assert {
    # the environments give their own key (samsa/<environment>/terraform.tfstate):
    # one backend.hcl serves them all
    condition     = !strcontains(output.backend_hcl, "key ")
    error_message = "backend.hcl leaves the state's key to each environment"
  }
}

run "a_lock_table_of_ones_own_is_passed_through" {
  command = plan

  variables {
    lock_table = "platform-terraform-locks"
  }
  assert {
    condition     = strcontains(output.backend_hcl, "dynamodb_table = \"platform-terraform-locks\"\n")
    error_message = "backend.hcl names the table the stack made"
  }
}

run "a_misspelt_region_is_refused" {
  command = plan

  variables {
    region = "eu-central"
  }
  expect_failures = [var.region]
}
