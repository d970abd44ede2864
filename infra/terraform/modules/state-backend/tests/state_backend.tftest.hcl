# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the state backend the environments' S3
# backend expects. Plans only: its bucket and table refuse a destroy.

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

variables {
  bucket = "samsa-terraform-state-123456789012"
}

run "a_versioned_private_encrypted_bucket_and_a_lock_table" {
  command = plan

  assert {
    condition     = aws_s3_bucket_versioning.state.versioning_configuration[0].status == "Enabled"
    error_message = "an overwritten state must stay recoverable: versioning on"
  }
  assert {
    condition = (aws_s3_bucket_public_access_block.state.block_public_acls
      && aws_s3_bucket_public_access_block.state.block_public_policy
      && aws_s3_bucket_public_access_block.state.ignore_public_acls
    && aws_s3_bucket_public_access_block.state.restrict_public_buckets)
    error_message = "the state bucket can never be made public"
  }
  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.state.rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
    error_message = "the state is encrypted with the module's KMS key"
  }
  assert {
    condition     = aws_dynamodb_table.locks.hash_key == "LockID" && aws_dynamodb_table.locks.name == "samsa-terraform-locks"
    error_message = "the S3 backend locks in a table keyed by LockID (a string)"
  }
  assert {
    condition     = one(aws_dynamodb_table.locks.attribute).type == "S"
    error_message = "LockID is a string"
  }
  assert {
    condition     = aws_dynamodb_table.locks.deletion_protection_enabled && one(aws_dynamodb_table.locks.point_in_time_recovery).enabled
    error_message = "the lock table is protected from deletion and recoverable"
  }
  assert {
    condition     = one(one(aws_s3_bucket_lifecycle_configuration.state.rule).noncurrent_version_expiration).noncurrent_days == 90
    error_message = "old states are kept 90 days by default"
  }
}

run "a_bucket_name_s3_refuses_is_refused" {
  command = plan

  variables {
    bucket = "Samsa_State"
  }
  expect_failures = [var.bucket]
}

run "a_fraction_of_a_day_is_refused" {
  command = plan

  variables {
    noncurrent_version_days = 0.5
  }
  expect_failures = [var.noncurrent_version_days]
}
