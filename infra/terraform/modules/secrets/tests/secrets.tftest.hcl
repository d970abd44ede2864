# terraform test, offline (tests/infra/test_terraform_plans.py runs it with
# the AWS provider from a local plugin directory): what the module promises
# of the environment's secrets, read from its plans. The real provider plans
# without calling AWS (no credentials, nothing read); a mocked one cannot
# stand in, as mocks have no ephemeral resources yet.

provider "aws" {
  region                      = "us-east-2"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

# planning opens the ephemeral password maker, which would ask AWS: the
# passwords are given (an ephemeral input, as an operator may give theirs),
# and that is what the write-only arguments then get
variables {
  name        = "samsa-test"
  kms_key_arn = "arn:aws:kms:us-east-2:111122223333:key/primary"
  replica_regions = {
    "us-east-1" = "arn:aws:kms:us-east-1:111122223333:key/use1"
    "eu-west-1" = "arn:aws:kms:eu-west-1:111122223333:key/euw1"
  }
  # planning opens the ephemeral password maker, which would ask AWS: the
  # passwords are given (an ephemeral input, as an operator may give
  # theirs), and that is what the write-only arguments then get
  passwords_given = true
  given_passwords = {
    "users/broker"       = "broker-0123456789abcdef"
    "users/admin"        = "admin-0123456789abcdef"
    "users/producer"     = "producer-0123456789abcdef"
    "users/mirror"       = "mirror-0123456789abcdef"
    "users/lag"          = "lag-0123456789abcdef"
    "users/audit"        = "audit-0123456789abcdef"
    "users/loader"       = "loader-0123456789abcdef"
    "zookeeper/cluster"  = "cluster-0123456789abcdef"
    "zookeeper/mirror"   = "zmirror-0123456789abcdef"
    "zookeeper/registry" = "registry-0123456789abcdef"
    "zookeeper/audit"    = "zaudit-0123456789abcdef"
    "zookeeper/loader"   = "zloader-0123456789abcdef"
    "http/prometheus"    = "prometheus-0123456789abcdef"
    "http/airflow"       = "airflow-0123456789abcdef"
    "http/admin"         = "hadmin-0123456789abcdef"
  }
}

run "every_password_is_written_write_only" {
  command = plan

  assert {
    condition = toset(keys(aws_secretsmanager_secret_version.generated)) == toset([
      "users/broker", "users/admin", "users/producer", "users/mirror", "users/lag",
      "users/audit", "users/loader", "zookeeper/cluster", "zookeeper/mirror",
      "zookeeper/registry", "zookeeper/audit", "zookeeper/loader", "http/prometheus",
    "http/airflow", "http/admin"])
    error_message = "a password for each user, ZooKeeper identity and HTTP user"
  }
  # the value goes through the write-only argument alone: never in the state
  assert {
    condition     = alltrue([for v in aws_secretsmanager_secret_version.generated : v.secret_string == null && v.secret_binary == null])
    error_message = "a generated password set through secret_string (it would be in the state)"
  }
  assert {
    condition     = alltrue([for v in aws_secretsmanager_secret_version.generated : v.secret_string_wo_version == 1])
    error_message = "the generation is the write-only value's version"
  }
}

run "every_secret_is_encrypted_with_the_key_and_replicated_to_each_region" {
  command = plan

  assert {
    condition = alltrue([for s in concat(values(aws_secretsmanager_secret.generated), values(aws_secretsmanager_secret.operator_put)) :
    s.kms_key_id == var.kms_key_arn])
    error_message = "a secret not encrypted with the environment's key"
  }
  assert {
    condition = alltrue([for s in concat(values(aws_secretsmanager_secret.generated), values(aws_secretsmanager_secret.operator_put)) :
      tomap({ for r in s.replica : r.region => r.kms_key_id }) == var.replica_regions
    ])
    error_message = "a secret not replicated to every producer region with that region's key"
  }
  assert {
    condition     = aws_secretsmanager_secret.generated["zookeeper/mirror"].name == "samsa-test/zookeeper/mirror"
    error_message = "secrets are named <name>/<kind>/<who>"
  }
  # the authority is put by the operator: Terraform makes no version of it
  assert {
    condition     = toset(keys(aws_secretsmanager_secret.operator_put)) == toset(["ca", "ca-certificate"])
    error_message = "the authority's two secrets"
  }
}

run "a_new_generation_rewrites_every_password" {
  command = plan
  variables {
    password_generation = 2
  }
  assert {
    condition     = alltrue([for v in aws_secretsmanager_secret_version.generated : v.secret_string_wo_version == 2])
    error_message = "a bumped generation does not reach the write-only versions"
  }
}

run "bad_settings_are_refused" {
  command = plan
  variables {
    recovery_window_days = 3
    password_generation  = 0
    name                 = "samsa/prod"
    replica_regions      = { "nowhere" = "not-a-key" }
  }
  expect_failures = [var.recovery_window_days, var.password_generation, var.name, var.replica_regions]
}

run "each_service_reads_only_its_own" {
  command = plan

  assert {
    condition     = output.readers.zookeeper == ["ca"]
    error_message = "ZooKeeper reads the authority alone"
  }
  assert {
    condition     = [for n in output.readers.mirror : n if startswith(n, "users/") || startswith(n, "zookeeper/")] == ["users/mirror", "zookeeper/mirror"]
    error_message = "the mirror reads no other service's user or identity"
  }
  assert {
    condition     = [for n in output.readers.audit : n if startswith(n, "users/") || startswith(n, "zookeeper/")] == ["users/audit", "zookeeper/audit"]
    error_message = "the audit reads no other service's user or identity"
  }
  assert {
    condition     = [for n in output.readers.analysis : n if startswith(n, "users/")] == ["users/loader"]
    error_message = "the analysis stack reads the loader's user alone"
  }
  assert {
    condition     = length([for n in output.readers.broker : n if startswith(n, "users/")]) == 7 && !contains(output.readers.broker, "zookeeper/mirror")
    error_message = "the brokers read every user (they provision them) and the cluster's identity alone"
  }
  assert {
    condition     = alltrue([for reader, names in output.readers : !contains(names, "ca-certificate") || reader == "analysis"])
    error_message = "ca-certificate is for the clients outside the hosts that hold the authority"
  }
}

run "a_service_user_cannot_be_left_out" {
  command = plan
  variables {
    users = ["broker", "admin"]
  }
  expect_failures = [var.users]
}
