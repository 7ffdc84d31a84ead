/*
 * A small AppImage type-2 runtime, built here from Debian's libsquashfuse and libfuse3 (static).
 *
 * Why our own: the reference runtime and appimagetool are only published as downloads from
 * GitHub, which this project's build machines cannot reach. The format is simple: this ELF,
 * with 'A','I',0x02 at byte 8, followed by a SquashFS image of the AppDir. At start the runtime
 * finds its own end (the SquashFS offset), mounts the image read-only with FUSE and executes
 * AppDir/AppRun with APPIMAGE, APPDIR, ARGV0 and OWD set, like the reference runtime does.
 *
 * Differences from the reference runtime, on purpose:
 *   - no FUSE (no /dev/fuse, no fusermount3, e.g. in a container): instead of failing, it extracts
 *     to $TMPDIR/appimage_extracted_<id>/ once and runs from there (reused on the next start);
 *   - supported options: --appimage-extract (to ./squashfs-root), --appimage-extract-and-run,
 *     --appimage-offset, --appimage-mount, --appimage-version, --appimage-help; the environment
 *     variable APPIMAGE_EXTRACT_AND_RUN=1 works as in the reference runtime;
 *   - no embedded update information or signature sections.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 32

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#undef _POSIX_C_SOURCE /* squashfuse/config.h sets its own */
#include "squashfuse.h"
#include "ll.h"

#define RUNTIME_VERSION "vrampilot-runtime 1"

static char self_path[PATH_MAX];

static void die(const char *what) {
    fprintf(stderr, "AppImage runtime: %s\n", what);
    exit(127);
}

/* The SquashFS image starts where the ELF ends: after the section header table or the last
 * section, whichever is later. */
static off_t elf_end(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    Elf64_Ehdr eh;
    off_t end = -1;
    if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
        eh.e_ident[EI_CLASS] == ELFCLASS64) {
        end = (off_t)(eh.e_shoff + (uint64_t)eh.e_shentsize * eh.e_shnum);
        for (int i = 0; i < eh.e_shnum; i++) {
            Elf64_Shdr sh;
            if (pread(fd, &sh, sizeof sh, (off_t)(eh.e_shoff + (uint64_t)i * eh.e_shentsize)) != (ssize_t)sizeof sh)
                break;
            if (sh.sh_type != SHT_NOBITS && (off_t)(sh.sh_offset + sh.sh_size) > end)
                end = (off_t)(sh.sh_offset + sh.sh_size);
        }
    }
    close(fd);
    return end;
}

/* ---------------------------------------------------------------- extraction (no FUSE needed) */

static int write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int extract(const char *image, off_t offset, const char *dest) {
    int fd = open(image, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    sqfs fs;
    if (sqfs_init(&fs, fd, (size_t)offset) != SQFS_OK) {
        close(fd);
        return -1;
    }
    if (mkdir(dest, 0755) != 0 && errno != EEXIST) return -1;
    sqfs_traverse trv;
    if (sqfs_traverse_open(&trv, &fs, sqfs_inode_root(&fs)) != SQFS_OK) return -1;
    const size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    int rc = buf ? 0 : -1;
    sqfs_err err = SQFS_OK;
    while (rc == 0 && sqfs_traverse_next(&trv, &err)) {
        if (trv.dir_end) continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dest, trv.path) >= (int)sizeof path) {
            rc = -1;
            break;
        }
        sqfs_inode inode;
        if (sqfs_inode_get(&fs, &inode, sqfs_dentry_inode(&trv.entry)) != SQFS_OK) {
            rc = -1;
            break;
        }
        mode_t mode = inode.base.mode & 07777;
        switch (inode.base.inode_type) {
        case SQUASHFS_DIR_TYPE:
        case SQUASHFS_LDIR_TYPE:
            if (mkdir(path, mode | 0700) != 0 && errno != EEXIST) rc = -1;
            break;
        case SQUASHFS_REG_TYPE:
        case SQUASHFS_LREG_TYPE: {
            int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode | 0600);
            if (out < 0) {
                rc = -1;
                break;
            }
            sqfs_off_t pos = 0, total = (sqfs_off_t)inode.xtra.reg.file_size;
            while (rc == 0 && pos < total) {
                sqfs_off_t n = total - pos < (sqfs_off_t)chunk ? total - pos : (sqfs_off_t)chunk;
                if (sqfs_read_range(&fs, &inode, pos, &n, buf) != SQFS_OK || n <= 0 ||
                    write_all(out, buf, (size_t)n) != 0)
                    rc = -1;
                pos += n;
            }
            if (close(out) != 0) rc = -1;
            break;
        }
        case SQUASHFS_SYMLINK_TYPE:
        case SQUASHFS_LSYMLINK_TYPE: {
            char target[PATH_MAX];
            size_t size = sizeof target;
            if (sqfs_readlink(&fs, &inode, target, &size) != SQFS_OK || symlink(target, path) != 0) rc = -1;
            break;
        }
        default: /* devices, fifos, sockets: an AppDir has none */
            break;
        }
    }
    if (err != SQFS_OK) rc = -1;
    free(buf);
    sqfs_traverse_close(&trv);
    sqfs_destroy(&fs);
    close(fd);
    return rc;
}

static void exec_apprun(const char *appdir, int argc, char **argv) {
    char apprun[PATH_MAX], cwd[PATH_MAX];
    snprintf(apprun, sizeof apprun, "%s/AppRun", appdir);
    setenv("APPIMAGE", self_path, 1);
    setenv("APPDIR", appdir, 1);
    setenv("ARGV0", argv[0], 1);
    if (getcwd(cwd, sizeof cwd)) setenv("OWD", cwd, 1);
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) die("out of memory");
    args[0] = apprun;
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    execv(apprun, args);
    perror("AppImage runtime: cannot run AppRun");
    exit(127);
}

static int extract_and_run(off_t offset, int argc, char **argv) {
    struct stat st;
    if (stat(self_path, &st) != 0) die("cannot stat the AppImage");
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char dest[PATH_MAX], work[PATH_MAX + 8];
    snprintf(dest, sizeof dest, "%s/appimage_extracted_%lx_%lx_%lx", tmp, (unsigned long)st.st_size,
             (unsigned long)st.st_mtime, (unsigned long)getuid());
    char probe[PATH_MAX + 8];
    snprintf(probe, sizeof probe, "%s/AppRun", dest);
    if (access(probe, X_OK) != 0) {
        snprintf(work, sizeof work, "%s.XXXXXX", dest);
        if (!mkdtemp(work) || chmod(work, 0755) != 0) die("cannot create a folder to extract into");
        if (extract(self_path, offset, work) != 0) die("extraction failed");
        if (rename(work, dest) != 0 && access(probe, X_OK) != 0) die("cannot move the extracted folder in place");
    }
    exec_apprun(dest, argc, argv);
    return 127;
}

/* ---------------------------------------------------------------- FUSE mount */

/* Serve the image at `mnt` until every process holding the keepalive pipe's write end (the app
 * and whatever inherited it) has exited, then unmount. Writes one byte to ready_fd once mounted. */
static int serve(off_t offset, const char *mnt, int ready_fd, int keep_fd) {
    sqfs_ll *ll = sqfs_ll_open(self_path, (size_t)offset);
    if (!ll) return 1;
    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.getattr = sqfs_ll_op_getattr;
    ops.opendir = sqfs_ll_op_opendir;
    ops.releasedir = sqfs_ll_op_releasedir;
    ops.readdir = sqfs_ll_op_readdir;
    ops.lookup = sqfs_ll_op_lookup;
    ops.open = sqfs_ll_op_open;
    ops.create = sqfs_ll_op_create;
    ops.release = sqfs_ll_op_release;
    ops.read = sqfs_ll_op_read;
    ops.readlink = sqfs_ll_op_readlink;
    ops.listxattr = sqfs_ll_op_listxattr;
    ops.getxattr = sqfs_ll_op_getxattr;
    ops.forget = sqfs_ll_op_forget;
    ops.statfs = stfs_ll_op_statfs;

    char *fargv[] = {"appimage", "-o", "ro,nodev,nosuid", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    sqfs_ll_chan ch;
    if (sqfs_ll_mount(&ch, mnt, &args, &ops, sizeof ops, ll) != SQFS_OK) return 1;
    if (write(ready_fd, "y", 1) != 1) {
        sqfs_ll_unmount(&ch, mnt);
        return 1;
    }
    close(ready_fd);

    struct fuse_session *se = ch.session;
    struct fuse_buf fbuf;
    memset(&fbuf, 0, sizeof fbuf);
    int fuse_fd = fuse_session_fd(se);
    while (!fuse_session_exited(se)) {
        struct pollfd p[2] = {{fuse_fd, POLLIN, 0}, {keep_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[0].revents & POLLIN) {
            int res = fuse_session_receive_buf(se, &fbuf);
            if (res == -EINTR || res == -EAGAIN) continue;
            if (res <= 0) break;
            fuse_session_process_buf(se, &fbuf);
            continue;
        }
        if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) break;
        if (p[1].revents) break; /* the app and its children are gone */
    }
    free(fbuf.mem);
    sqfs_ll_unmount(&ch, mnt);
    return 0;
}

/* Fork a detached server for the mount; returns 0 once `mnt` is mounted. The write end of the
 * keepalive pipe stays open in this process and goes through exec into the app. */
static int mount_image(off_t offset, const char *mnt) {
    int ready[2], keep[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe(keep) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(ready[0]);
        close(keep[1]);
        setsid(); /* Ctrl-C in the terminal goes to the app, not to the file system under it */
        pid_t server = fork();
        if (server != 0) _exit(server < 0 ? 1 : 0);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
            close(devnull);
        }
        int rc = serve(offset, mnt, ready[1], keep[0]);
        rmdir(mnt);
        _exit(rc);
    }
    close(ready[1]);
    close(keep[0]);
    waitpid(pid, NULL, 0);
    char c;
    ssize_t n;
    do n = read(ready[0], &c, 1);
    while (n < 0 && errno == EINTR);
    close(ready[0]);
    if (n != 1) {
        close(keep[1]);
        return -1;
    }
    return 0;
}

static void usage(void) {
    printf("This is an AppImage of VRAM Pilot (" RUNTIME_VERSION ").\n"
           "  --appimage-extract            extract the contents to ./squashfs-root\n"
           "  --appimage-extract-and-run    extract to $TMPDIR (once) and run from there, without FUSE\n"
           "  --appimage-mount              mount, print the mount point, serve until interrupted\n"
           "  --appimage-offset             print the offset of the SquashFS image\n"
           "  --appimage-version            print the runtime version\n"
           "Any other arguments go to the application.\n");
}

int main(int argc, char **argv) {
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (len <= 0) die("cannot find its own file (/proc/self/exe)");
    self_path[len] = 0;
    const char *env_image = getenv("TARGET_APPIMAGE"); /* as the reference runtime: debug another image */
    if (env_image && realpath(env_image, self_path) == NULL) die("TARGET_APPIMAGE not found");
    off_t offset = elf_end(self_path);
    if (offset <= 0) die("cannot read its own ELF header");

    const char *opt = argc > 1 ? argv[1] : "";
    if (strncmp(opt, "--appimage-", 11) == 0) {
        if (strcmp(opt, "--appimage-offset") == 0) {
            printf("%lld\n", (long long)offset);
            return 0;
        }
        if (strcmp(opt, "--appimage-version") == 0) {
            printf("%s\n", RUNTIME_VERSION);
            return 0;
        }
        if (strcmp(opt, "--appimage-help") == 0) {
            usage();
            return 0;
        }
        if (strcmp(opt, "--appimage-extract") == 0) {
            if (extract(self_path, offset, "squashfs-root") != 0) die("extraction failed");
            printf("squashfs-root\n");
            return 0;
        }
        if (strcmp(opt, "--appimage-extract-and-run") == 0) {
            argv[1] = argv[0];
            return extract_and_run(offset, argc - 1, argv + 1);
        }
        if (strcmp(opt, "--appimage-mount") == 0) {
            char mnt[PATH_MAX];
            const char *tmp = getenv("TMPDIR");
            snprintf(mnt, sizeof mnt, "%s/.mount_VRAMPiXXXXXX", tmp && *tmp ? tmp : "/tmp");
            if (!mkdtemp(mnt)) die("cannot create a mount point");
            if (mount_image(offset, mnt) != 0) die("cannot mount the image with FUSE");
            printf("%s\n", mnt);
            fflush(stdout);
            pause(); /* the server unmounts when this process ends */
            return 0;
        }
        usage();
        return 1;
    }

    const char *ear = getenv("APPIMAGE_EXTRACT_AND_RUN");
    if (ear && strcmp(ear, "1") == 0) return extract_and_run(offset, argc, argv);

    char mnt[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    snprintf(mnt, sizeof mnt, "%s/.mount_VRAMPiXXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(mnt) && mount_image(offset, mnt) == 0) exec_apprun(mnt, argc, argv);
    rmdir(mnt);
    fprintf(stderr,
            "AppImage runtime: FUSE is not available here (install the fuse3 package for a faster start);\n"
            "extracting once to $TMPDIR instead.\n");
    return extract_and_run(offset, argc, argv);
}
