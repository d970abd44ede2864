terraform {
  required_version = ">= 1.9.0" # validations that refer to another variable
}
