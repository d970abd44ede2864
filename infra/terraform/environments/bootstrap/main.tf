# Bootstrap: the state backend of every environment, applied once per account
# before them (infra/terraform/README.md, "Plan and apply").

provider "aws" {
  region = var.region

  default_tags {
    tags = var.tags
  }
}

module "state_backend" {
  source     = "../../modules/state-backend"
  bucket     = var.bucket
  lock_table = var.lock_table
  tags       = var.tags
}
