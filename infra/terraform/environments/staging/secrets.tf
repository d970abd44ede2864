# The environment's secrets (module secrets) in its one region, and who reads
# which at boot
# (docs/security.md, "In the cloud"). No secret's value is in a variable, the
# plan or the state.

module "secrets" {
  source      = "../../modules/secrets"
  name        = "samsa-stg"
  kms_key_arn = module.analysis.kms_key_arn
  # one region: no replicas (dc-staging's brokers read these, with the analysis key)
  recovery_window_days = 7
  password_generation  = var.password_generation
  tags                 = var.tags
}

locals {
  # who reads which secret (module secrets' readers): in the analysis region
  # the secrets themselves
  secret_arns = module.secrets.reader_secret_arns
}
