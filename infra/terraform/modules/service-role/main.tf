# One IAM role per service, for its EC2 instances: SSM sessions instead of
# SSH, the CloudWatch agent, pulling the project's images, and only what the
# service itself needs.

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  name               = var.name
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "managed" {
  for_each = toset([
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
  ])
  role       = aws_iam_role.this.name
  policy_arn = each.value
}

# the project's images, pulled at boot (infra/terraform/boot/common.sh): the
# account's samsa/* repositories (module registry) in any region, nothing else
data "aws_caller_identity" "current" {}

data "aws_iam_policy_document" "images" {
  statement {
    sid       = "LogInToTheRegistry"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"] # ECR's token is not a resource of a repository
  }
  statement {
    sid = "PullTheProjectsImages"
    actions = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer",
    "ecr:BatchCheckLayerAvailability"]
    resources = ["arn:aws:ecr:*:${data.aws_caller_identity.current.account_id}:repository/samsa/*"]
  }
}

resource "aws_iam_role_policy" "images" {
  name   = "samsa-images"
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.images.json
}

# one per name: for_each over names known at plan (a count on whether an
# unknown document is null cannot be planned from zero)
resource "aws_iam_role_policy" "extra" {
  for_each = var.policies
  name     = each.key
  role     = aws_iam_role.this.id
  policy   = each.value
}

moved {
  from = aws_iam_role_policy.extra[0]
  to   = aws_iam_role_policy.extra["service"]
}

# the secrets it reads at boot, and their keys through Secrets Manager only
data "aws_iam_policy_document" "secrets" {
  count = length(var.secret_arns) > 0 ? 1 : 0
  statement {
    sid       = "ReadItsSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = var.secret_arns
  }
  statement {
    sid       = "DecryptItsSecrets"
    actions   = ["kms:Decrypt"]
    resources = var.secrets_kms_key_arns
    condition {
      test     = "StringLike"
      variable = "kms:ViaService"
      values   = ["secretsmanager.*.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "secrets" {
  count  = length(var.secret_arns) > 0 ? 1 : 0
  name   = "samsa-secrets"
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.secrets[0].json

  lifecycle {
    precondition {
      condition     = length(var.secrets_kms_key_arns) > 0
      error_message = "secret_arns without secrets_kms_key_arns: the secrets could not be decrypted (and AWS refuses a statement with no resource)."
    }
  }
}

resource "aws_iam_instance_profile" "this" {
  name = var.name
  role = aws_iam_role.this.name
  tags = var.tags
}
