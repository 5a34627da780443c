"""A setuid-root probe, as an attacker's image would hold one: a few lines of C, static.

It prints its effective uid, the capability lines, NoNewPrivs and Seccomp of /proc/self/status,
and whether the kernel let it open a packet socket (``socket(AF_PACKET, SOCK_RAW, 0)``, which
reads every frame on every interface, loopback included). busybox's own setuid copy drops its
privileges by itself, so it proves nothing: this binary keeps whatever the kernel gives it.
On x86_64 a child of it last makes a system call through the 32-bit ABI (``int $0x80``,
getpid) and the probe says whether it was answered or what signal killed the child. Another child
first tries to make a user namespace (``unshare(CLONE_NEWUSER)``) and says whether it could.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.images import _add_shell, import_root

PROBE_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    char line[512];
    FILE *status = fopen("/proc/self/status", "r");
    printf("probe euid=%d\n", (int)geteuid());
    while (status && fgets(line, sizeof line, status))
        if (!strncmp(line, "Cap", 3) || !strncmp(line, "NoNewPrivs", 10) || !strncmp(line, "Seccomp:", 8))
            printf("probe %s", line);
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (fd < 0)
        printf("probe packet socket refused: %s\n", strerror(errno));
    else
        printf("probe packet socket OPENED\n");
    fflush(stdout);
    pid_t nested = fork();
    if (nested == 0) {
        if (unshare(CLONE_NEWUSER) == 0)
            printf("probe user namespace: MADE\n");
        else
            printf("probe user namespace: refused: %s\n", strerror(errno));
        fflush(stdout);
        _exit(0);
    }
    waitpid(nested, NULL, 0);
#if defined(__x86_64__)
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        long answer;
        __asm__ volatile("int $0x80" : "=a"(answer) : "a"(20L) : "memory");
        printf("probe i386 system call: answered %ld\n", answer);
        fflush(stdout);
        _exit(0);
    }
    int ended = 0;
    waitpid(child, &ended, 0);
    if (WIFSIGNALED(ended))
        printf("probe i386 system call: killed by signal %d\n", WTERMSIG(ended));
#endif
    return 0;
}
"""


class ProbeError(Exception):
    """The probe cannot be built here (no gcc, or no static C library)."""


def build_probe(into: Path) -> Path:
    """``into/probe``: static, owned by root, mode 4755 (setuid root)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ProbeError("no gcc")
    source = into / "probe.c"
    source.write_text(PROBE_C)
    binary = into / "probe"
    built = subprocess.run(
        [gcc, "-static", "-O1", "-o", str(binary), str(source)], capture_output=True, text=True
    )
    if built.returncode != 0:
        raise ProbeError(f"gcc -static: {built.stderr.strip()[-300:]}")
    binary.chmod(0o4755)
    return binary


def build_probe_image(reference: str) -> None:
    """Import ``reference``: busybox and bash, and the setuid-root probe at /bin/probe."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        root = work / "root"
        (root / "bin").mkdir(parents=True)
        (root / "tmp").mkdir(mode=0o1777)
        (root / "tmp").chmod(0o1777)
        _add_shell(work, root)
        probe = build_probe(work)
        shutil.copy(probe, root / "bin" / "probe")
        (root / "bin" / "probe").chmod(0o4755)
        import_root(root, reference, work)


def probe_report(log: str) -> dict[str, str]:
    """The probe's lines as ``{name: value}`` (``euid``, ``CapEff``, ``NoNewPrivs``, ``packet``,
    ``user namespace``, ``i386 system call``)."""
    report: dict[str, str] = {}
    for line in log.splitlines():
        if not line.startswith("probe "):
            continue
        text = line[len("probe ") :]
        if text.startswith("euid="):
            report["euid"] = text.split("=", 1)[1].strip()
        elif text.startswith("packet socket "):
            report["packet"] = text[len("packet socket ") :].strip()
        elif ":" in text:
            name, value = text.split(":", 1)
            report[name.strip()] = value.strip()
    return report
