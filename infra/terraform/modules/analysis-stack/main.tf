# The analysis stack: Airflow (API server, scheduler, DAG processor; the
# LocalExecutor; metadata in PostgreSQL) and the warehouse loader's Spark
# (spark-submit, local[*]) on one instance, the warehouse in an S3 bucket.

locals {
  tags = merge(var.tags, { "samsa:module" = "analysis-stack" })
}

resource "aws_s3_bucket" "warehouse" {
  bucket = var.warehouse_bucket
  tags   = local.tags
}

resource "aws_s3_bucket_public_access_block" "warehouse" {
  bucket                  = aws_s3_bucket.warehouse.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "warehouse" {
  bucket = aws_s3_bucket.warehouse.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "warehouse" {
  bucket = aws_s3_bucket.warehouse.id
  rule {
    id     = "old-versions-and-unfinished-uploads"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = 30
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
}

resource "aws_s3_bucket_versioning" "warehouse" {
  bucket = aws_s3_bucket.warehouse.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_vpc_security_group_ingress_rule" "ui" {
  for_each          = toset(var.ui_cidrs)
  security_group_id = module.service.security_group_id
  description       = "Airflow UI and REST API"
  ip_protocol       = "tcp"
  from_port         = 8080
  to_port           = 8080
  cidr_ipv4         = each.value
}

module "database" {
  source                   = "../postgres"
  name                     = "${var.name}-airflow"
  database                 = "airflow"
  vpc_id                   = var.vpc_id
  subnet_ids               = var.subnet_ids
  client_security_group_id = module.service.security_group_id
  instance_class           = var.db_instance_class
  allocated_gb             = 20
  backup_days              = 7
  kms_key_arn              = var.kms_key_arn
  tags                     = local.tags
}

data "aws_iam_policy_document" "analysis" {
  statement {
    sid       = "TheWarehouse"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:GetBucketLocation"]
    resources = [aws_s3_bucket.warehouse.arn, "${aws_s3_bucket.warehouse.arn}/*"]
  }
  statement {
    sid       = "ReadTheDatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [module.database.secret_arn]
  }
  statement {
    sid       = "UseTheKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}

module "service" {
  source         = "../service-instances"
  name           = "${var.name}-analysis"
  description    = "Airflow UI to operators; the loader pulls from the analysis brokers"
  vpc_id         = var.vpc_id
  subnet_ids     = var.subnet_ids
  instance_type  = var.instance_type
  ami_id         = var.ami_id
  kms_key_arn    = var.kms_key_arn
  root_volume_gb = 200 # Spark's staging and shuffle space
  policy_json    = data.aws_iam_policy_document.analysis.json
  wheel_url      = var.samsa_wheel_url
  user_data = [templatefile("${path.module}/user_data.sh.tftpl", {
    zookeeper       = var.zookeeper_connect
    audit_url       = var.audit_url
    output          = "s3a://${aws_s3_bucket.warehouse.bucket}/warehouse"
    db_host         = module.database.address
    db_secret_arn   = module.database.secret_arn
    samsa_wheel_url = var.samsa_wheel_url
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}
