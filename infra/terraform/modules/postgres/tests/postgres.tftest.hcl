# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the private PostgreSQL a service owns. TLS
# forced (rds.force_ssl), the master password managed by RDS in Secrets
# Manager (never an argument here), storage, Performance Insights and that
# secret encrypted with the key given, not publicly accessible, deletion
# protection and a final snapshot, and PostgreSQL's port admitted from the
# service's security group alone; the database and port outputs are the
# instance's, the port the one the security group admits. The instance's port
# is RDS's to choose (5432 for PostgreSQL, the mock's stand-in value): what a
# mock cannot show is what RDS itself would accept (engine version, class).

mock_provider "aws" {
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::111122223333:role/samsa-test-audit-rds-monitoring"
    }
  }
  # what RDS answers for a PostgreSQL made without a port, and the secret it keeps
  mock_resource "aws_db_instance" {
    defaults = {
      port    = 5432
      address = "samsa-test-audit.abcdefghijkl.us-east-2.rds.amazonaws.com"
      master_user_secret = [{
        secret_arn    = "arn:aws:secretsmanager:us-east-2:111122223333:secret:rds!db-00000000-0000-0000-0000-000000000000-AbCdEf"
        kms_key_id    = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
        secret_status = "active"
      }]
    }
  }
}

variables {
  name                     = "samsa-test-audit"
  database                 = "audit"
  vpc_id                   = "vpc-0123456789abcdef0"
  subnet_ids               = ["subnet-a", "subnet-b", "subnet-c"]
  client_security_group_id = "sg-0123456789abcdef0"
  kms_key_arn              = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
}

run "tls_only_and_the_password_kept_by_rds" {
  command = plan

  assert {
    condition     = [for p in aws_db_parameter_group.this.parameter : p.value if p.name == "rds.force_ssl"] == ["1"]
    error_message = "PostgreSQL refuses a connection without TLS (rds.force_ssl = 1)"
  }
  assert {
    condition     = aws_db_parameter_group.this.family == "postgres16" && aws_db_instance.this.engine == "postgres" && aws_db_instance.this.engine_version == "16"
    error_message = "the parameter group's family is the engine's (PostgreSQL 16)"
  }
  assert {
    condition     = aws_db_instance.this.parameter_group_name == aws_db_parameter_group.this.name
    error_message = "the instance uses that parameter group"
  }
  assert {
    condition     = aws_db_instance.this.manage_master_user_password && aws_db_instance.this.password == null
    error_message = "the master password is RDS's, in Secrets Manager: no password given"
  }
  assert {
    condition     = aws_db_instance.this.master_user_secret_kms_key_id == var.kms_key_arn
    error_message = "the password's secret is encrypted with the key given"
  }
  assert {
    condition     = aws_db_instance.this.db_name == "audit" && aws_db_instance.this.username == "audit"
    error_message = "the database and its master user are both the database's name"
  }
}

run "encrypted_private_and_kept" {
  command = plan

  assert {
    condition     = aws_db_instance.this.storage_encrypted && aws_db_instance.this.kms_key_id == var.kms_key_arn
    error_message = "the storage is encrypted with the key given"
  }
  assert {
    condition     = aws_db_instance.this.performance_insights_enabled && aws_db_instance.this.performance_insights_kms_key_id == var.kms_key_arn
    error_message = "Performance Insights is encrypted with the key given"
  }
  assert {
    condition     = aws_db_instance.this.publicly_accessible == false
    error_message = "the database is never publicly accessible"
  }
  assert {
    condition     = tolist(aws_db_subnet_group.this.subnet_ids) == tolist(toset(var.subnet_ids)) && aws_db_instance.this.db_subnet_group_name == aws_db_subnet_group.this.name
    error_message = "it lives in the private subnets given"
  }
  assert {
    condition     = aws_db_instance.this.deletion_protection && aws_db_instance.this.skip_final_snapshot != true && aws_db_instance.this.final_snapshot_identifier == "samsa-test-audit-final"
    error_message = "deletion protection, and a final snapshot <name>-final should it be deleted (skip_final_snapshot unset: the provider's false)"
  }
  assert {
    condition     = aws_db_instance.this.multi_az && aws_db_instance.this.backup_retention_period == 14
    error_message = "multi-AZ and 14 days of backups by default"
  }
}

run "only_the_service_reaches_postgresql" {
  command = apply

  assert {
    condition = (aws_vpc_security_group_ingress_rule.service.referenced_security_group_id == var.client_security_group_id
      && aws_vpc_security_group_ingress_rule.service.cidr_ipv4 == null
    && aws_vpc_security_group_ingress_rule.service.ip_protocol == "tcp")
    error_message = "PostgreSQL admits the service's security group alone, no range"
  }
  assert {
    condition     = aws_db_instance.this.vpc_security_group_ids == toset([aws_security_group.db.id])
    error_message = "the instance is in that security group alone"
  }
  assert {
    condition = (aws_vpc_security_group_ingress_rule.service.from_port == output.port
    && aws_vpc_security_group_ingress_rule.service.to_port == output.port)
    error_message = "the port admitted is the database's port"
  }
  assert {
    condition     = output.port == aws_db_instance.this.port && output.database == aws_db_instance.this.db_name && output.database == "audit"
    error_message = "the port and database outputs are the instance's"
  }
  assert {
    condition     = output.secret_arn == aws_db_instance.this.master_user_secret[0].secret_arn
    error_message = "the secret output is the one RDS keeps the password in"
  }
  assert {
    condition     = output.address == aws_db_instance.this.address && output.security_group_id == aws_security_group.db.id
    error_message = "the address and security group outputs are the instance's"
  }
}

# the longest identifier a caller makes (module analysis-stack: a 41-character
# name and "-airflow"): its monitoring role's name, <name>-rds-monitoring, is
# 64 characters, IAM's most; the plan is the check (the provider refuses more)
run "the_longest_name_a_caller_gives_plans" {
  command = plan
  variables {
    name = "samsa-test-analysis-a-long-name-for-tests-airflow"
  }
}

run "a_name_over_49_characters_is_refused" {
  # the defect: 63 were allowed, and the monitoring role, NAME-rds-monitoring,
  # was then refused at plan (IAM's 64)
  command = plan
  variables {
    name = "samsa-test-analysis-a-long-name-for-tests-airflow0"
  }
  expect_failures = [var.name]
}

run "a_name_rds_refuses_is_refused" {
  command = plan
  variables {
    name = "samsa--audit"
  }
  expect_failures = [var.name]
}

run "one_subnet_is_refused" {
  command = plan
  variables {
    subnet_ids = ["subnet-a"]
  }
  expect_failures = [var.subnet_ids]
}

run "no_backup_is_refused" {
  command = plan
  variables {
    backup_days = 0
  }
  expect_failures = [var.backup_days]
}

run "more_backup_days_than_rds_keeps_is_refused" {
  command = plan
  variables {
    backup_days = 36
  }
  expect_failures = [var.backup_days]
}

run "less_storage_than_rds_gives_is_refused" {
  command = plan
  variables {
    allocated_gb = 19
  }
  expect_failures = [var.allocated_gb]
}

run "a_database_name_postgresql_refuses_is_refused" {
  command = plan
  variables {
    database = "audit-db"
  }
  expect_failures = [var.database]
}
