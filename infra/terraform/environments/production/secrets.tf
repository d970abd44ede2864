# The environment's secrets (module secrets) in the analysis region,
# replicated to each producer region, and who reads which at boot
# (docs/security.md, "In the cloud"). No secret's value is in a variable, the
# plan or the state.

module "secrets" {
  source      = "../../modules/secrets"
  providers   = { aws = aws.analysis }
  name        = "samsa-prod"
  kms_key_arn = module.analysis.kms_key_arn
  replica_regions = {
    (var.datacenters["dc-us-east"]) = module.dc_us_east.kms_key_arn
    (var.datacenters["dc-eu-west"]) = module.dc_eu_west.kms_key_arn
  }
  password_generation = var.password_generation
  tags                = var.tags
}

locals {
  # who reads which secret (module secrets' readers): in the analysis region
  # the secrets themselves, in a producer region their replicas there
  secret_arns         = module.secrets.reader_secret_arns
  replica_secret_arns = module.secrets.reader_secret_arns_any_region
}
