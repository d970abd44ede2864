# terraform test, offline (tests/infra/test_terraform_plans.py runs it with
# the AWS provider from a local plugin directory): the whole staging
# environment planned from zero, as its first apply plans it, every module's
# expressions, validations and boot scripts evaluated together. The real
# provider plans without calling AWS; what its data sources would read of
# the account is given (override_data). The defect it found: a count on
# whether a policy document (unknown until apply) was null, which no plan
# from zero can evaluate (module service-role now takes policies by name).
# What it cannot show: what AWS itself would answer at apply.

# the real provider, planning without calling AWS (no credentials); what its
# data sources would ask the account is given (override_data)
provider "aws" {
  region                      = "us-east-1"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = data.aws_availability_zones.this
  values = {
    names = ["us-east-1a", "us-east-1b", "us-east-1c"]
  }
}

override_data {
  target = module.analysis.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.analysis.module.brokers.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.analysis.module.network.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.analysis.module.zookeeper.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.analysis_stack.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.audit.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_staging.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_staging.module.brokers.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_staging.module.network.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_staging.module.zookeeper.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.mirror.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

# module secrets makes its passwords with an ephemeral resource, which a
# mocked provider cannot have: its outputs stand in (its own suite plans it
# with the real provider: modules/secrets/tests)
override_module {
  target = module.secrets
  outputs = {
    name = "samsa-stg"
    reader_secret_arns = {
      zookeeper = ["arn:aws:secretsmanager:us-east-1:111122223333:secret:samsa-stg/ca-certificate-AbCdEf"]
      broker    = ["arn:aws:secretsmanager:us-east-1:111122223333:secret:samsa-stg/users/broker-AbCdEf"]
      mirror    = ["arn:aws:secretsmanager:us-east-1:111122223333:secret:samsa-stg/users/mirror-AbCdEf"]
      audit     = ["arn:aws:secretsmanager:us-east-1:111122223333:secret:samsa-stg/users/audit-AbCdEf"]
      analysis  = ["arn:aws:secretsmanager:us-east-1:111122223333:secret:samsa-stg/users/loader-AbCdEf"]
    }
  }
}

variables {
  ami_ids          = { "us-east-1" = "ami-0123456789abcdef0" }
  image_version    = "0.1.0-aaaaaaaaaaaa"
  warehouse_bucket = "samsa-stg-warehouse-test"
}

run "the_environment_plans_from_zero" {
  command = plan

  # planned from an empty state, as its first apply is: most outputs are
  # known only once AWS made their resources; what the plan knows is checked
  assert {
    condition     = output.warehouse == "s3a://samsa-stg-warehouse-test/warehouse"
    error_message = "the loader writes to the environment's bucket"
  }
}

# the environment's own inputs are refused before anything is planned

run "an_analysis_region_without_an_ami_is_refused" {
  command = plan

  variables {
    analysis_region = "us-west-2"
  }
  expect_failures = [var.ami_ids]
}

run "a_second_datacenter_the_providers_do_not_name_is_refused" {
  command = plan

  variables {
    datacenters = { "dc-staging" = "us-east-1", "dc-other" = "us-east-1" }
  }
  expect_failures = [var.datacenters]
}

run "more_replicas_than_brokers_are_refused" {
  command = plan

  variables {
    replication_factor = 3
  }
  expect_failures = [var.replication_factor]
}
