variable "name" {
  description = "The component's name (for plans and outputs), e.g. \"cluster dc-a\"."
  type        = string
  validation {
    condition     = length(var.name) > 0
    error_message = "name must not be empty."
  }
}

variable "up_command" {
  description = "Shell command that starts the component and returns once it is ready."
  type        = string
}

variable "down_command" {
  description = "Shell command that stops the component (run on destroy and before a replacement)."
  type        = string
}

variable "working_dir" {
  description = "Directory the commands run in (the Samsa checkout)."
  type        = string
}

variable "triggers" {
  description = "The component's settings: a change to any of them replaces it (down, then up)."
  type        = map(string)
  default     = {}
}
