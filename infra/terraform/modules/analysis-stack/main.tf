# The analysis stack: Airflow (API server, scheduler, DAG processor,
# triggerer; the LocalExecutor; metadata in PostgreSQL) and the warehouse
# loader's Spark (spark-submit, local[*]) on one instance, from the
# samsa/analysis image; the warehouse in an S3 bucket.

locals {
  tags = merge(var.tags, { "samsa:module" = "analysis-stack" })

  # the DAGs' settings (hadoop_loader/config.py): the loader's and the
  # warehouse's tables, the [warehouse] table last (a secured boot adds its
  # lines after it)
  warehouse_config = <<-TOML
    [loader]
    zookeeper = "${var.zookeeper_connect}"
    output = "s3a://${aws_s3_bucket.warehouse.bucket}/warehouse"
    master = "local[*]"
    cluster_name = "analysis"
    # Spark stages here and the publish uploads to the bucket (no Hadoop S3
    # connector): on the instance's disk, kept across restarts
    staging_dir = "/data/airflow/loader-staging"

    [warehouse]
    audit_url = "${var.audit_url}"
  TOML
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
  policies       = { service = data.aws_iam_policy_document.analysis.json }
  user_data = [templatefile("${path.module}/user_data.sh.tftpl", {
    boot_common      = file("${path.module}/../../boot/common.sh")
    ssm_agent_base   = local.ssm_agent_base
    metadata_url     = "http://169.254.169.254"
    image            = var.image
    secrets          = var.secrets_name
    secrets_endpoint = ""
    warehouse_config = local.warehouse_config
    # the database RDS made: its master user (the database's name, module
    # postgres) and password are in the secret it keeps and rotates
    db_host       = module.database.address
    db_port       = module.database.port
    db_name       = module.database.database
    db_secret_arn = module.database.secret_arn
    state_dir     = "/var/lib/samsa"
    config_dir    = "/etc/samsa"
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

# Amazon's SSM agent, from the region's bucket (boot/common.sh install_ssm_agent)
data "aws_region" "ssm" {}

locals {
  ssm_agent_base = "https://amazon-ssm-${data.aws_region.ssm.name}.s3.${data.aws_region.ssm.name}.amazonaws.com/latest"
}
