# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): what a service's role may do. The images
# pulled from the account's samsa/* repositories in any region and nothing
# else (the token on "*", as ECR requires), SSM and the CloudWatch agent by
# their managed policies, one inline policy per name in `policies` (none for
# {}), and the secrets readable only when secret_arns are given, their keys
# through Secrets Manager only. The documents are checked as the module
# writes their statements (data.aws_iam_policy_document): the mock does not
# render their JSON, so what IAM itself would make of a document (and its
# size limits) is not shown here.

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
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::111122223333:role/samsa-test-broker"
    }
  }
}

variables {
  name = "samsa-test-broker"
}

run "ssm_cloudwatch_and_the_projects_images_only" {
  command = plan

  assert {
    condition = toset([for a in aws_iam_role_policy_attachment.managed : a.policy_arn]) == toset([
      "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
      "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
    ])
    error_message = "SSM sessions and the CloudWatch agent, by their managed policies, nothing else managed"
  }
  assert {
    condition = (one(data.aws_iam_policy_document.assume.statement).actions == toset(["sts:AssumeRole"])
    && one(one(data.aws_iam_policy_document.assume.statement).principals).identifiers == toset(["ec2.amazonaws.com"]))
    error_message = "the role is assumed by EC2 alone"
  }
  assert {
    condition = {
      for s in data.aws_iam_policy_document.images.statement : s.sid => s.resources
      } == {
      LogInToTheRegistry    = toset(["*"])
      PullTheProjectsImages = toset(["arn:aws:ecr:*:111122223333:repository/samsa/*"])
    }
    error_message = "images are pulled from the account's samsa/* repositories (any region), nothing else"
  }
  assert {
    condition = {
      for s in data.aws_iam_policy_document.images.statement : s.sid => s.actions
      } == {
      LogInToTheRegistry    = toset(["ecr:GetAuthorizationToken"])
      PullTheProjectsImages = toset(["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"])
    }
    error_message = "on \"*\" only ECR's token (no repository's resource); on the repositories only what a pull needs"
  }
  assert {
    condition     = aws_iam_role_policy.images.policy == data.aws_iam_policy_document.images.json
    error_message = "the role's image policy is that document"
  }
  assert {
    condition     = length(aws_iam_role_policy.extra) == 0
    error_message = "policies = {}: no inline policy of the service's own"
  }
  assert {
    condition     = length(aws_iam_role_policy.secrets) == 0 && length(data.aws_iam_policy_document.secrets) == 0
    error_message = "no secret_arns: no secret may be read"
  }
  assert {
    condition     = aws_iam_instance_profile.this.name == "samsa-test-broker" && aws_iam_role.this.name == "samsa-test-broker"
    error_message = "the role and its instance profile are named for the service"
  }
}

run "one_inline_policy_per_name" {
  command = plan

  variables {
    policies = {
      service = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Action\":\"s3:GetObject\",\"Resource\":\"arn:aws:s3:::samsa-test/*\"}]}"
      metrics = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Action\":\"cloudwatch:PutMetricData\",\"Resource\":\"*\"}]}"
    }
  }

  assert {
    condition     = toset(keys(aws_iam_role_policy.extra)) == toset(["service", "metrics"])
    error_message = "an inline policy per name given"
  }
  assert {
    condition     = alltrue([for k, p in aws_iam_role_policy.extra : p.name == k && p.policy == var.policies[k]])
    error_message = "each policy named by its key, its document the one given"
  }
}

run "the_secrets_given_readable_through_secrets_manager_only" {
  command = plan

  variables {
    secret_arns = [
      "arn:aws:secretsmanager:*:111122223333:secret:samsa-test/users/broker-AbCdEf",
      "arn:aws:secretsmanager:*:111122223333:secret:samsa-test/ca-certificate-AbCdEf",
    ]
    secrets_kms_key_arns = ["arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"]
  }

  assert {
    condition     = length(aws_iam_role_policy.secrets) == 1 && aws_iam_role_policy.secrets[0].policy == data.aws_iam_policy_document.secrets[0].json
    error_message = "secret_arns given: one policy reading them"
  }
  assert {
    condition = {
      for s in data.aws_iam_policy_document.secrets[0].statement : s.sid => { actions = s.actions, resources = s.resources }
      } == {
      ReadItsSecrets    = { actions = toset(["secretsmanager:GetSecretValue"]), resources = toset(var.secret_arns) }
      DecryptItsSecrets = { actions = toset(["kms:Decrypt"]), resources = toset(var.secrets_kms_key_arns) }
    }
    error_message = "the secrets given alone are read, decrypted with their keys alone"
  }
  assert {
    condition = alltrue([for s in data.aws_iam_policy_document.secrets[0].statement :
      length(s.condition) == 1
      && one(s.condition).test == "StringLike"
      && one(s.condition).variable == "kms:ViaService"
      && toset(one(s.condition).values) == toset(["secretsmanager.*.amazonaws.com"])
    if s.sid == "DecryptItsSecrets"])
    error_message = "the keys decrypt through Secrets Manager only"
  }
}

run "secrets_without_their_keys_are_refused" {
  command = plan

  variables {
    secret_arns = ["arn:aws:secretsmanager:*:111122223333:secret:samsa-test/users/broker-AbCdEf"]
  }
  expect_failures = [aws_iam_role_policy.secrets[0]]
}

run "a_name_iam_refuses_is_refused" {
  command = plan

  variables {
    name = "samsa-test-a-name-far-longer-than-the-fifty-eight-allowed-x"
  }
  expect_failures = [var.name]
}
