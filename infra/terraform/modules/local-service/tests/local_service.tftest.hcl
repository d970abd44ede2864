# terraform test, offline (terraform_data is built into Terraform: no
# provider): a component is made by its up command, kept while its triggers
# stay, and replaced (down, then up) when one changes. The runs apply for
# real; their commands are `true`, so nothing starts.

variables {
  name         = "cluster dc-a"
  up_command   = "true up"
  down_command = "true down"
  working_dir  = "."
  triggers     = { brokers = "2", runtime = "processes" }
}

run "a_plan_shows_the_commands_it_will_run" {
  command = plan

  assert {
    condition     = terraform_data.service.input.up == "true up" && terraform_data.service.input.down == "true down"
    error_message = "the commands are kept in the resource's input: a plan shows them, the destroy-time provisioner reads the down command there"
  }
  assert {
    condition     = terraform_data.service.input.working_dir == "." && terraform_data.service.input.name == "cluster dc-a"
    error_message = "the working directory and the name are kept with them"
  }
  assert {
    condition     = terraform_data.service.triggers_replace == tomap({ brokers = "2", runtime = "processes" })
    error_message = "the triggers decide a replacement"
  }
}

run "the_component_is_made" {
  assert {
    condition     = output.id != "" && output.name == "cluster dc-a"
    error_message = "an applied component has an id and its name"
  }
}

run "an_unchanged_setting_keeps_it" {
  assert {
    condition     = output.id == run.the_component_is_made.id
    error_message = "the same triggers keep the component: no restart"
  }
}

run "a_changed_setting_replaces_it" {
  variables {
    triggers = { brokers = "3", runtime = "processes" }
  }
  assert {
    condition     = output.id != run.the_component_is_made.id
    error_message = "a changed trigger replaces the component (down, then up)"
  }
}

run "a_changed_command_alone_does_not_restart_it" {
  # only the triggers restart a component: the up command is run when one
  # is made, so a new command takes effect at its next replacement
  variables {
    triggers   = { brokers = "3", runtime = "processes" }
    up_command = "true up --verbose"
  }
  assert {
    condition     = output.id == run.a_changed_setting_replaces_it.id
    error_message = "a changed command alone keeps the running component"
  }
}

run "a_nameless_component_is_refused" {
  command = plan

  variables {
    name = ""
  }
  expect_failures = [var.name]
}
