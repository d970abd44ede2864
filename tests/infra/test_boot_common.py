"""The boot scripts' common steps (infra/terraform/boot/common.sh) run on
this machine's kernel, where a container cannot show them: ``wan_buffers``
applies the WAN's TCP buffer sizes in a network namespace of its own (they
are per namespace), and warns when the kernel refuses them, which sysctl
itself may not say (Debian 12's exits 0 when the kernel answers "Invalid
argument"): the values are read back. Root only (namespaces): CI runs as
root; elsewhere the tests say so and skip."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from terraform_helpers import ROOT

COMMON = os.path.join(ROOT, "infra", "terraform", "boot", "common.sh")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("sysctl"),
    reason="needs root, unshare and sysctl (a network and mount namespace of its own)")


def in_namespaces(tmp_path, script: str) -> subprocess.CompletedProcess:
    """``script`` after common.sh, in new network and mount namespaces, with
    a directory of ``tmp_path`` mounted over /etc/sysctl.d (the machine's
    own is not touched)."""
    sysctl_d = tmp_path / "sysctl.d"
    sysctl_d.mkdir()
    return subprocess.run(
        ["unshare", "--net", "--mount", "--propagation", "private", "bash", "-euc",
         f'mount --bind "{sysctl_d}" /etc/sysctl.d; source "{COMMON}"; {script}'],
        capture_output=True, text=True, timeout=60)


def test_wan_buffers_are_applied_and_kept_for_every_boot(tmp_path):
    out = in_namespaces(tmp_path, "wan_buffers; sysctl -n net.ipv4.tcp_rmem net.ipv4.tcp_wmem")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""                     # applied: no warning
    assert [" ".join(line.split()) for line in out.stdout.splitlines()] == [
        "4096 131072 67108864", "4096 16384 67108864"]
    kept = (tmp_path / "sysctl.d" / "60-samsa-wan.conf").read_text()
    assert "net.ipv4.tcp_rmem = 4096 131072 67108864\n" in kept


def test_a_kernel_that_refuses_them_is_warned_of_and_the_boot_goes_on(tmp_path):
    # /proc/sys read-only, as in a container: sysctl fails to write, the
    # values read back are the kernel's defaults
    out = in_namespaces(tmp_path, "mount --bind /proc/sys /proc/sys; "
                                  "mount -o remount,bind,ro /proc/sys; "
                                  "wan_buffers; echo went-on")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "went-on"
    assert "warning: the WAN buffer sizes are not in effect (net.ipv4.tcp_rmem is '" \
        in out.stderr, out.stderr
