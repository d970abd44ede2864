# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the analysis stack's warehouse and who may
# reach what. The warehouse bucket private (every public access blocked),
# versioned, encrypted with the key given, old versions and unfinished
# uploads expiring; the UI's port (8080) admitted from ui_cidrs alone; the
# instance role writing to its own bucket and no other, reading its
# database's secret and using the one key; the warehouse output (the
# loader's output setting) the bucket's. What a mock cannot show: what S3 or
# IAM would answer at apply (a bucket name taken, a policy's evaluation).

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "111122223333"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_data "aws_region" {
    defaults = {
      name = "us-east-2"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::111122223333:role/samsa-test-analysis-analysis"
    }
  }
  mock_resource "aws_s3_bucket" {
    defaults = {
      arn = "arn:aws:s3:::samsa-test-warehouse"
    }
  }
  mock_resource "aws_instance" {
    defaults = {
      private_ip = "10.30.1.30"
    }
  }
  # what RDS answers for a PostgreSQL made without a port, and the secret it keeps
  mock_resource "aws_db_instance" {
    defaults = {
      port    = 5432
      address = "samsa-test-analysis-airflow.abcdefghijkl.us-east-2.rds.amazonaws.com"
      master_user_secret = [{
        secret_arn    = "arn:aws:secretsmanager:us-east-2:111122223333:secret:rds!db-00000000-0000-0000-0000-000000000000-AbCdEf"
        kms_key_id    = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
        secret_status = "active"
      }]
    }
  }
}

variables {
  name              = "samsa-test-analysis"
  vpc_id            = "vpc-0123456789abcdef0"
  subnet_ids        = ["subnet-a", "subnet-b", "subnet-c"]
  zookeeper_connect = "10.30.0.10:2181,10.30.16.10:2181,10.30.32.10:2181/analysis"
  audit_url         = "https://10.30.1.25:8090"
  ui_cidrs          = ["192.168.10.0/24"]
  warehouse_bucket  = "samsa-test-warehouse"
  image             = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/analysis:0.1.0-aaaaaaaaaaaa"
  secrets_name      = "samsa-test"
  ami_id            = "ami-0123456789abcdef0"
  kms_key_arn       = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
}

run "a_private_versioned_encrypted_warehouse" {
  command = apply

  assert {
    condition     = aws_s3_bucket.warehouse.bucket == "samsa-test-warehouse"
    error_message = "the bucket is the one named"
  }
  assert {
    condition = (aws_s3_bucket_public_access_block.warehouse.bucket == aws_s3_bucket.warehouse.id
      && aws_s3_bucket_public_access_block.warehouse.block_public_acls
      && aws_s3_bucket_public_access_block.warehouse.block_public_policy
      && aws_s3_bucket_public_access_block.warehouse.ignore_public_acls
    && aws_s3_bucket_public_access_block.warehouse.restrict_public_buckets)
    error_message = "the warehouse can never be made public"
  }
  assert {
    condition = (aws_s3_bucket_versioning.warehouse.bucket == aws_s3_bucket.warehouse.id
    && one(aws_s3_bucket_versioning.warehouse.versioning_configuration).status == "Enabled")
    error_message = "the warehouse is versioned"
  }
  assert {
    condition = (aws_s3_bucket_server_side_encryption_configuration.warehouse.bucket == aws_s3_bucket.warehouse.id
      && one(one(aws_s3_bucket_server_side_encryption_configuration.warehouse.rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
    && one(one(aws_s3_bucket_server_side_encryption_configuration.warehouse.rule).apply_server_side_encryption_by_default).kms_master_key_id == var.kms_key_arn)
    error_message = "the warehouse is encrypted with the key given"
  }
  assert {
    condition = (aws_s3_bucket_lifecycle_configuration.warehouse.bucket == aws_s3_bucket.warehouse.id
      && one(aws_s3_bucket_lifecycle_configuration.warehouse.rule).status == "Enabled"
      && one(one(aws_s3_bucket_lifecycle_configuration.warehouse.rule).noncurrent_version_expiration).noncurrent_days == 30
    && one(one(aws_s3_bucket_lifecycle_configuration.warehouse.rule).abort_incomplete_multipart_upload).days_after_initiation == 7)
    error_message = "old versions expire after 30 days, unfinished uploads after 7"
  }
  assert {
    condition     = output.warehouse == "s3a://samsa-test-warehouse/warehouse"
    error_message = "the loader writes under warehouse/ of the bucket"
  }
  assert {
    condition     = strcontains(local.warehouse_config, "output = \"${output.warehouse}\"")
    error_message = "the DAGs' settings write where the warehouse output says"
  }
  assert {
    condition     = output.airflow_url == "https://10.30.1.30:8080"
    error_message = "Airflow on its instance's address, port 8080, over HTTPS when secured"
  }
}

run "an_open_stack_serves_airflow_over_http" {
  command = apply

  variables {
    secrets_name = ""
  }
  assert {
    condition     = output.airflow_url == "http://10.30.1.30:8080"
    error_message = "open (no secrets): Airflow on plain HTTP"
  }
}

run "the_role_writes_its_own_bucket_alone" {
  command = apply

  assert {
    condition = {
      for s in data.aws_iam_policy_document.analysis.statement : s.sid => s.resources
      } == {
      TheWarehouse          = toset(["arn:aws:s3:::samsa-test-warehouse", "arn:aws:s3:::samsa-test-warehouse/*"])
      ReadTheDatabaseSecret = toset([module.database.secret_arn])
      UseTheKey             = toset([var.kms_key_arn])
    }
    error_message = "the bucket, its database's secret and the key, no other resource"
  }
  assert {
    condition = alltrue(flatten([for s in data.aws_iam_policy_document.analysis.statement :
    [for a in s.actions : s.sid == "TheWarehouse" if startswith(a, "s3:")]]))
    error_message = "no S3 action but on the warehouse bucket"
  }
  assert {
    condition     = length([for s in data.aws_iam_policy_document.analysis.statement : s if contains(s.resources, "*")]) == 0
    error_message = "no statement on \"*\""
  }
  assert {
    condition     = module.database.database == "airflow"
    error_message = "Airflow's metadata in a database of its own"
  }
}

run "the_ui_admits_ui_cidrs_alone" {
  command = apply

  variables {
    ui_cidrs = ["192.168.10.0/24", "10.99.0.0/16"]
  }

  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.ui : r.cidr_ipv4]) == toset(["192.168.10.0/24", "10.99.0.0/16"])
    error_message = "the UI admits the ranges given, nothing else"
  }
  assert {
    condition = alltrue([for r in aws_vpc_security_group_ingress_rule.ui :
    r.from_port == 8080 && r.to_port == 8080 && r.ip_protocol == "tcp" && r.security_group_id == module.service.security_group_id])
    error_message = "only port 8080, on the instance's security group"
  }
  assert {
    condition     = output.security_group_id == module.service.security_group_id
    error_message = "the security_group_id output (the analysis brokers admit it: the loader) is the instance's"
  }
}

run "the_whole_internet_is_refused" {
  command = plan
  variables {
    ui_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.ui_cidrs]
}

run "the_whole_internet_spelled_otherwise_is_refused" {
  command = plan
  variables {
    ui_cidrs = ["192.168.10.0/24", "0.0.0.0/1"]
  }
  expect_failures = [var.ui_cidrs]
}

run "no_ui_range_is_refused" {
  command = plan
  variables {
    ui_cidrs = []
  }
  expect_failures = [var.ui_cidrs]
}

run "a_bucket_name_s3_refuses_is_refused" {
  command = plan
  variables {
    warehouse_bucket = "Samsa_Warehouse"
  }
  expect_failures = [var.warehouse_bucket]
}

run "one_subnet_is_refused" {
  command = plan
  variables {
    subnet_ids = ["subnet-a"]
  }
  expect_failures = [var.subnet_ids]
}
