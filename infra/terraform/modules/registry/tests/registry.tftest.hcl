# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the environment's registry as the README
# promises it. A repository samsa/<image> per image the instances run (the
# ones infra/docker/push.py pushes: zookeeper, samsa, analysis), immutable
# tags, every push scanned, the images encrypted with the key given, and a
# lifecycle policy keeping the newest keep_images (30) of each repository;
# the registry output is the host the environments pull from. What a mock
# cannot show: what ECR itself would answer (a lifecycle policy's rules are
# checked by ECR at apply, not by the provider).

mock_provider "aws" {
  mock_resource "aws_ecr_repository" {
    defaults = {
      repository_url = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/image"
      arn            = "arn:aws:ecr:us-east-2:111122223333:repository/samsa/image"
    }
  }
}

variables {
  kms_key_arn = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
}

run "a_repository_per_image_the_instances_run" {
  command = plan

  assert {
    condition     = toset([for r in aws_ecr_repository.image : r.name]) == toset(["samsa/zookeeper", "samsa/samsa", "samsa/analysis"])
    error_message = "one repository samsa/<image> per image the instances run (zookeeper, samsa, analysis), no other"
  }
  assert {
    condition     = alltrue([for r in aws_ecr_repository.image : r.image_tag_mutability == "IMMUTABLE"])
    error_message = "a tag is one build: tags are immutable"
  }
  assert {
    condition     = alltrue([for r in aws_ecr_repository.image : one(r.image_scanning_configuration).scan_on_push])
    error_message = "every push is scanned for vulnerabilities"
  }
  assert {
    condition = alltrue([for r in aws_ecr_repository.image :
      one(r.encryption_configuration).encryption_type == "KMS"
    && one(r.encryption_configuration).kms_key == var.kms_key_arn])
    error_message = "the images are encrypted with the environment's KMS key"
  }
  assert {
    condition     = alltrue([for r in aws_ecr_repository.image : r.force_delete == false])
    error_message = "a repository holding images is never deleted with them"
  }
}

run "each_repository_keeps_its_newest_30_images" {
  command = plan

  assert {
    condition     = keys(aws_ecr_lifecycle_policy.keep_newest) == keys(aws_ecr_repository.image)
    error_message = "every repository has its lifecycle policy"
  }
  assert {
    condition     = alltrue([for k, p in aws_ecr_lifecycle_policy.keep_newest : p.repository == "samsa/${k}"])
    error_message = "each policy is its own repository's"
  }
  assert {
    condition = alltrue([for p in aws_ecr_lifecycle_policy.keep_newest :
      length(jsondecode(p.policy).rules) == 1
      && jsondecode(p.policy).rules[0].selection.tagStatus == "any"
      && jsondecode(p.policy).rules[0].selection.countType == "imageCountMoreThan"
      && jsondecode(p.policy).rules[0].selection.countNumber == 30
    && jsondecode(p.policy).rules[0].action.type == "expire"])
    error_message = "only the newest 30 images (of any tag) are kept; older ones expire"
  }
}

run "the_images_given_and_the_registry_host" {
  command = apply

  variables {
    images      = ["samsa", "zookeeper"]
    keep_images = 50
  }

  assert {
    condition     = keys(output.repository_arns) == ["samsa", "zookeeper"]
    error_message = "a repository ARN per image given, by image"
  }
  assert {
    condition     = alltrue([for p in aws_ecr_lifecycle_policy.keep_newest : jsondecode(p.policy).rules[0].selection.countNumber == 50])
    error_message = "keep_images is the count kept"
  }
  assert {
    condition     = output.registry == "111122223333.dkr.ecr.us-east-2.amazonaws.com"
    error_message = "the registry output is the host alone (ACCOUNT.dkr.ecr.REGION.amazonaws.com), what the environments prefix to samsa/<image>"
  }
}

run "keeping_fewer_than_two_is_refused" {
  command = plan
  variables {
    keep_images = 1
  }
  expect_failures = [var.keep_images]
}

run "keeping_more_than_1000_is_refused" {
  command = plan
  variables {
    keep_images = 1001
  }
  expect_failures = [var.keep_images]
}

run "a_fraction_of_an_image_is_refused" {
  command = plan
  variables {
    keep_images = 2.5
  }
  expect_failures = [var.keep_images]
}

run "no_image_is_refused" {
  command = plan
  variables {
    images = []
  }
  expect_failures = [var.images]
}

run "an_image_name_ecr_refuses_is_refused" {
  command = plan
  variables {
    images = ["Samsa"]
  }
  expect_failures = [var.images]
}
