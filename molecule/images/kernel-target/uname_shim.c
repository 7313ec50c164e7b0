/* TEST DOUBLE of a booted kernel's name: every dynamically linked program on the Ubuntu-shaped
 * rig (uname -r, Python's platform and so Ansible's facts, dpkg's hooks) sees the release the
 * kernel double booted (/run/vdf-kernel-double/release, written by vdf-boot-double), not the
 * container host's. Without that file the real uname answers unchanged. Loaded through
 * /etc/ld.so.preload; statically linked programs still see the host's kernel. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

int uname(struct utsname *buf) {
    static int (*real_uname)(struct utsname *);
    if (!real_uname)
        real_uname = (int (*)(struct utsname *))dlsym(RTLD_NEXT, "uname");
    int rc = real_uname(buf);
    if (rc != 0)
        return rc;
    FILE *file = fopen("/run/vdf-kernel-double/release", "re");
    if (!file)
        return rc;
    char line[sizeof buf->release];
    if (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] != '\0') {
            strncpy(buf->release, line, sizeof buf->release - 1);
            buf->release[sizeof buf->release - 1] = '\0';
        }
    }
    fclose(file);
    return rc;
}
