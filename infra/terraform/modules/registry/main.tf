# The environment's container registry: an ECR repository per image the
# instances run (make push-images pushes them, infra/docker/push.py). Tags are
# immutable (a tag is one build: the instances never pull a tag twice), every
# push is scanned, the images are encrypted with the environment's key, and
# only the newest images are kept.

locals {
  tags = merge(var.tags, { "samsa:module" = "registry" })
}

resource "aws_ecr_repository" "image" {
  for_each             = toset(var.images)
  name                 = "samsa/${each.value}"
  image_tag_mutability = "IMMUTABLE"
  force_delete         = false
  image_scanning_configuration {
    scan_on_push = true
  }
  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = var.kms_key_arn
  }
  tags = local.tags
}

resource "aws_ecr_lifecycle_policy" "keep_newest" {
  for_each   = aws_ecr_repository.image
  repository = each.value.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "Keep the newest ${var.keep_images} images"
      selection = {
        tagStatus   = "any"
        countType   = "imageCountMoreThan"
        countNumber = var.keep_images
      }
      action = { type = "expire" }
    }]
  })
}
