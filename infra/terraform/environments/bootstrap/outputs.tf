output "backend_hcl" {
  description = "The environments' backend settings, as a file for terraform init -backend-config=FILE."
  value       = <<-HCL
    bucket         = "${module.state_backend.bucket}"
    dynamodb_table = "${module.state_backend.lock_table}"
    kms_key_id     = "${module.state_backend.kms_key_arn}"
    region         = "${var.region}"
    encrypt        = true
  HCL
}
