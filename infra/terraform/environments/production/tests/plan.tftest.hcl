# terraform test, offline (tests/infra/test_terraform_plans.py runs it with
# the AWS provider from a local plugin directory): the whole production
# environment, three regions, planned from zero as its first apply plans it,
# every module's expressions, validations and boot scripts evaluated
# together. The real provider plans without calling AWS; what its data
# sources would read of the account is given (override_data). What it
# cannot show: what AWS itself would answer at apply.

provider "aws" {
  alias                       = "dc_us_east"
  region                      = "us-east-1"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

provider "aws" {
  alias                       = "dc_eu_west"
  region                      = "eu-west-1"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

provider "aws" {
  alias                       = "analysis"
  region                      = "us-east-2"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = data.aws_availability_zones.dc_us_east
  values = {
    names = ["us-east-1a", "us-east-1b", "us-east-1c"]
  }
}

override_data {
  target = data.aws_availability_zones.dc_eu_west
  values = {
    names = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
  }
}

override_data {
  target = data.aws_availability_zones.analysis
  values = {
    names = ["us-east-2a", "us-east-2b", "us-east-2c"]
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
  target = module.dc_eu_west.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_eu_west.module.brokers.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_eu_west.module.network.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_eu_west.module.zookeeper.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_us_east.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_us_east.module.brokers.module.service.module.role.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_us_east.module.network.data.aws_caller_identity.current
  values = {
    account_id = "111122223333"
  }
}

override_data {
  target = module.dc_us_east.module.zookeeper.module.service.module.role.data.aws_caller_identity.current
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


# module secrets makes its passwords with an ephemeral resource that would
# ask AWS at plan: its outputs stand in (its own suite plans it with given
# passwords: modules/secrets/tests)
override_module {
  target = module.secrets
  outputs = {
    name = "samsa-prod"
    reader_secret_arns = {
      zookeeper = ["arn:aws:secretsmanager:us-east-2:111122223333:secret:samsa-prod/ca-certificate-AbCdEf"]
      broker    = ["arn:aws:secretsmanager:us-east-2:111122223333:secret:samsa-prod/users/broker-AbCdEf"]
      mirror    = ["arn:aws:secretsmanager:us-east-2:111122223333:secret:samsa-prod/users/mirror-AbCdEf"]
      audit     = ["arn:aws:secretsmanager:us-east-2:111122223333:secret:samsa-prod/users/audit-AbCdEf"]
      analysis  = ["arn:aws:secretsmanager:us-east-2:111122223333:secret:samsa-prod/users/loader-AbCdEf"]
    }
    reader_secret_arns_any_region = {
      zookeeper = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-prod/ca-certificate-AbCdEf"]
      broker    = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-prod/users/broker-AbCdEf"]
      mirror    = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-prod/users/mirror-AbCdEf"]
      audit     = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-prod/users/audit-AbCdEf"]
      analysis  = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-prod/users/loader-AbCdEf"]
    }
  }
}

variables {
  ami_ids = {
    "us-east-1" = "ami-0123456789abcdef0"
    "eu-west-1" = "ami-0123456789abcdef1"
    "us-east-2" = "ami-0123456789abcdef2"
  }
  image_version    = "0.1.0-aaaaaaaaaaaa"
  warehouse_bucket = "samsa-prod-warehouse-test"
}

run "the_environment_plans_from_zero" {
  command = plan

  # planned from an empty state, as its first apply is: most outputs are
  # known only once AWS made their resources; what the plan knows is checked
  assert {
    condition     = output.warehouse == "s3a://samsa-prod-warehouse-test/warehouse"
    error_message = "the loader writes to the environment's bucket"
  }
}

# the environment's own inputs are refused before anything is planned

run "an_environment_without_an_ami_for_one_of_its_regions_is_refused" {
  command = plan

  variables {
    ami_ids = {
      "us-east-1" = "ami-0123456789abcdef0"
      "eu-west-1" = "ami-0123456789abcdef1"
    }
  }
  expect_failures = [var.ami_ids]
}

run "a_datacenter_the_providers_do_not_name_is_refused" {
  command = plan

  variables {
    datacenters = { "dc-us-east" = "us-east-1", "dc-ap-south" = "ap-south-1" }
  }
  expect_failures = [var.datacenters]
}

run "a_region_misspelt_is_refused" {
  command = plan

  variables {
    analysis_region = "us-east2"
  }
  expect_failures = [var.analysis_region]
}

run "more_replicas_than_brokers_are_refused" {
  command = plan

  variables {
    brokers_per_dc     = 2
    replication_factor = 3
  }
  expect_failures = [var.replication_factor]
}

run "a_warehouse_bucket_s3_refuses_is_refused" {
  command = plan

  variables {
    warehouse_bucket = "Samsa_Warehouse"
  }
  expect_failures = [var.warehouse_bucket]
}

run "mirror_processes_out_of_range_are_refused" {
  command = plan

  variables {
    mirror_processes = 0
  }
  expect_failures = [var.mirror_processes]
}
