# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the audit service and the database module
# postgres makes for it. The service's port (8090) admitted from reader_cidrs
# alone, on the audit instances' security group; the instance role reading
# the secret RDS keeps for that database (module postgres's secret_arn) and
# decrypting with the key given; the database named audit, at the port
# postgres reports (RDS's 5432, the mock's stand-in); the URL's scheme
# following secrets_name; and the ranges that may never be admitted refused.
# What an assertion here cannot reach: what is inside the child modules (the
# rule module postgres writes for the group passed to it, the boot script
# module service-instances is given); modules/postgres/tests shows that the
# database admits its client_security_group_id alone.

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
      arn = "arn:aws:iam::111122223333:role/samsa-test-analysis-audit"
    }
  }
  mock_resource "aws_instance" {
    defaults = {
      private_ip = "10.30.1.25"
    }
  }
  # what RDS answers for a PostgreSQL made without a port, and the secret it keeps
  mock_resource "aws_db_instance" {
    defaults = {
      port    = 5432
      address = "samsa-test-analysis-audit.abcdefghijkl.us-east-2.rds.amazonaws.com"
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
  reader_cidrs      = ["10.30.0.0/16", "192.168.10.0/24"]
  image             = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa"
  secrets_name      = "samsa-test"
  ami_id            = "ami-0123456789abcdef0"
  kms_key_arn       = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
}

run "the_audit_and_its_database" {
  command = apply

  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.readers : r.cidr_ipv4]) == toset(var.reader_cidrs)
    error_message = "the audit's port admits the reader ranges given, nothing else"
  }
  assert {
    condition = alltrue([for r in aws_vpc_security_group_ingress_rule.readers :
    r.from_port == 8090 && r.to_port == 8090 && r.ip_protocol == "tcp" && r.security_group_id == module.service.security_group_id])
    error_message = "only port 8090, on the audit instances' security group"
  }
  assert {
    condition     = output.security_group_id == module.service.security_group_id && output.security_group_id != module.database.security_group_id
    error_message = "the audit's security group is its instances', not the database's"
  }
  assert {
    condition     = module.database.database == "audit" && module.database.port == 5432
    error_message = "the database module postgres made is audit, at the port RDS reports"
  }
  assert {
    condition = {
      for s in data.aws_iam_policy_document.audit.statement : s.sid => { actions = s.actions, resources = s.resources }
      } == {
      ReadTheDatabaseSecret = { actions = toset(["secretsmanager:GetSecretValue"]), resources = toset([module.database.secret_arn]) }
      DecryptIt             = { actions = toset(["kms:Decrypt"]), resources = toset([var.kms_key_arn]) }
    }
    error_message = "the role reads the one secret RDS keeps for its database, and decrypts with the key that encrypts it"
  }
  assert {
    condition     = output.db_secret_arn == module.database.secret_arn
    error_message = "the db_secret_arn output is the database's secret"
  }
  assert {
    condition     = output.url == "https://10.30.1.25:8090"
    error_message = "secured: the audit answers over HTTPS, on its instance's address, port 8090"
  }
}

run "open_it_answers_over_http" {
  command = plan

  variables {
    secrets_name = ""
  }

  assert {
    condition     = startswith(output.url, "http://") && endswith(output.url, ":8090")
    error_message = "secrets_name = \"\": plain HTTP on 8090"
  }
}

# the whole internet in any spelling, a range wider than /8, and what is not
# an IPv4 range are refused
run "the_whole_internet_is_refused" {
  command = plan
  variables {
    reader_cidrs = ["10.30.0.0/16", "0.0.0.0/0"]
  }
  expect_failures = [var.reader_cidrs]
}

run "the_whole_internet_spelled_otherwise_is_refused" {
  command = plan
  variables {
    reader_cidrs = ["0.0.0.0/1"]
  }
  expect_failures = [var.reader_cidrs]
}

run "ipv6_everything_is_refused" {
  command = plan
  variables {
    reader_cidrs = ["::/0"]
  }
  expect_failures = [var.reader_cidrs]
}

run "no_reader_is_refused" {
  command = plan
  variables {
    reader_cidrs = []
  }
  expect_failures = [var.reader_cidrs]
}

run "backup_days_outside_1_to_35_are_refused" {
  command = plan
  variables {
    db_backup_days = 36
  }
  expect_failures = [var.db_backup_days]
}

run "one_subnet_is_refused" {
  command = plan
  variables {
    subnet_ids = ["subnet-a"]
  }
  expect_failures = [var.subnet_ids]
}

run "an_image_without_a_tag_is_refused" {
  command = plan
  variables {
    image = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa"
  }
  expect_failures = [var.image]
}
