# One component of the local environment, run as processes on this machine:
# created by its up command, destroyed by its down command, replaced (down,
# then up) when one of its triggers changes.
resource "terraform_data" "service" {
  triggers_replace = var.triggers

  # a destroy-time provisioner may only refer to self: keep what it needs
  # here (and the up command, so that a plan shows what will run)
  input = {
    name        = var.name
    up          = var.up_command
    down        = var.down_command
    working_dir = var.working_dir
  }

  provisioner "local-exec" {
    command     = var.up_command
    working_dir = var.working_dir
  }

  provisioner "local-exec" {
    when        = destroy
    command     = self.input.down
    working_dir = self.input.working_dir
  }
}
