# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): how every service's instances run. IMDSv2
# only, no public address, an encrypted gp3 root volume tagged (default_tags
# do not reach it), instance i in subnet i modulo their number, each data
# volume in its instance's subnet's zone (read by data.aws_subnet, a zone of
# its own per subnet here), and the user data and AMI ignored once applied.
# The data volumes keep prevent_destroy, so the runs that make them only
# plan; the apply runs make none. What a mock cannot show: whether AWS's
# provider would replace an instance (a mock computes no replacement): what
# is shown is that a changed boot script or AMI is not planned at all.

mock_provider "aws" {
  mock_data "aws_subnet" {
    defaults = {
      availability_zone = "us-east-1a"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "111122223333"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

# the subnets of three zones: instance i's volume must be in its own subnet's
override_data {
  target = data.aws_subnet.instance[1]
  values = {
    availability_zone = "us-east-1b"
  }
}

override_data {
  target = data.aws_subnet.instance[2]
  values = {
    availability_zone = "us-east-1c"
  }
}

variables {
  name          = "samsa-test-svc"
  description   = "a test service"
  vpc_id        = "vpc-0123456789abcdef0"
  subnet_ids    = ["subnet-a", "subnet-b", "subnet-c"]
  instances     = 3
  user_data     = ["#!/bin/bash\necho first\n"]
  instance_type = "m6i.large"
  ami_id        = "ami-0123456789abcdef0"
  kms_key_arn   = "arn:aws:kms:us-east-1:111122223333:key/volumes"
  tags          = { "samsa:module" = "test" }
}

run "imdsv2_no_public_address_an_encrypted_tagged_root" {
  command = plan

  assert {
    condition = alltrue([for i in aws_instance.this :
    one(i.metadata_options).http_tokens == "required" && one(i.metadata_options).http_endpoint == "enabled"])
    error_message = "the metadata service answers IMDSv2 (a session token) only"
  }
  assert {
    condition     = alltrue([for i in aws_instance.this : i.associate_public_ip_address == false])
    error_message = "no instance gets a public address"
  }
  assert {
    condition = alltrue([for i in aws_instance.this :
      one(i.root_block_device).encrypted
      && one(i.root_block_device).volume_type == "gp3"
      && one(i.root_block_device).kms_key_id == var.kms_key_arn
    && one(i.root_block_device).volume_size == 20])
    error_message = "each root volume is gp3, 20 GB by default, encrypted with the key given"
  }
  assert {
    condition = [for i in aws_instance.this : one(i.root_block_device).tags] == [
      for n in range(3) : tomap({ "samsa:module" = "test", Name = "samsa-test-svc-${n}-root" })
    ]
    error_message = "each root volume carries the tags and its own name (the providers' default_tags do not reach it)"
  }
  assert {
    condition     = [for i in aws_instance.this : i.tags.Name] == ["samsa-test-svc-0", "samsa-test-svc-1", "samsa-test-svc-2"]
    error_message = "instance i is <name>-<i>"
  }
  assert {
    condition     = length(aws_ebs_volume.data) == 0 && length(data.aws_subnet.instance) == 0
    error_message = "no data_volume_gb: no data volume"
  }
}

run "instances_spread_over_the_subnets_given" {
  command = plan

  variables {
    instances   = 5
    subnet_ids  = ["subnet-a", "subnet-b"]
    private_ips = ["10.10.1.10", "10.10.2.10", "10.10.1.11", "10.10.2.11", "10.10.1.12"]
  }

  assert {
    condition     = [for i in aws_instance.this : i.subnet_id] == ["subnet-a", "subnet-b", "subnet-a", "subnet-b", "subnet-a"]
    error_message = "instance i goes to subnet i modulo their number"
  }
  assert {
    condition     = tolist([for i in aws_instance.this : i.private_ip]) == var.private_ips
    error_message = "instance i gets the fixed address at index i"
  }
}

run "each_data_volume_in_its_subnets_zone" {
  command = plan

  variables {
    data_volume_gb = 100
  }

  assert {
    condition     = tolist([for s in data.aws_subnet.instance : s.id]) == var.subnet_ids
    error_message = "the subnet read for volume i is instance i's"
  }
  assert {
    condition     = [for v in aws_ebs_volume.data : v.availability_zone] == ["us-east-1a", "us-east-1b", "us-east-1c"]
    error_message = "each data volume is made in its instance's subnet's availability zone"
  }
  assert {
    condition = alltrue([for v in aws_ebs_volume.data :
    v.encrypted && v.type == "gp3" && v.size == 100 && v.kms_key_id == var.kms_key_arn])
    error_message = "the data volumes are encrypted gp3 of the size given"
  }
  assert {
    condition     = [for v in aws_ebs_volume.data : v.tags.Name] == ["samsa-test-svc-0-data", "samsa-test-svc-1-data", "samsa-test-svc-2-data"]
    error_message = "each data volume is named for its instance"
  }
  assert {
    condition     = alltrue([for a in aws_volume_attachment.data : a.device_name == "/dev/xvdb"]) && length(aws_volume_attachment.data) == 3
    error_message = "each attached as /dev/xvdb"
  }
}

run "first_apply" {
  command = apply

  variables {
    instances = 2
  }

  assert {
    condition     = length(output.instance_ids) == 2 && alltrue([for i in aws_instance.this : i.user_data_replace_on_change == false])
    error_message = "two instances, a changed boot script never replacing them"
  }
}

run "a_new_boot_script_or_ami_is_not_planned" {
  command = plan

  variables {
    instances = 2
    user_data = ["#!/bin/bash\necho second\n"]
    ami_id    = "ami-0fedcba9876543210"
  }

  assert {
    condition     = [for i in aws_instance.this : i.user_data_base64] == [base64gzip("#!/bin/bash\necho first\n"), base64gzip("#!/bin/bash\necho first\n")]
    error_message = "a changed boot script is ignored (rolled by the operator, one instance at a time)"
  }
  assert {
    condition     = [for i in aws_instance.this : i.ami] == ["ami-0123456789abcdef0", "ami-0123456789abcdef0"]
    error_message = "a new AMI is ignored likewise"
  }
  assert {
    condition     = output.instance_ids == run.first_apply.instance_ids
    error_message = "the same instances"
  }
}

run "no_instance_is_refused" {
  command = plan
  variables {
    instances = 0
  }
  expect_failures = [var.instances]
}

run "a_boot_script_over_ec2s_16_kb_compressed_is_refused" {
  command = plan

  variables {
    # hashes' hex compresses to about half: some 23 KB once gzip-compressed
    user_data = [join("", [for i in range(700) : sha256(tostring(i))])]
  }
  expect_failures = [var.user_data]
}
