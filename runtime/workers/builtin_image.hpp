#pragma once
/// @file
/// The image `--image busybox` names on a fresh machine: a root filesystem
/// built from Debian's busybox-static (`/bin/busybox`, installed by
/// bin/setup) into `<images_dir>/busybox`, so the seed's first example
/// (inside-a-worker.md, "A quick look") works with nothing pulled. Issue 13
/// item 1. An image the operator put there first is never replaced.

#include <string>

#include <caf/error.hpp>

namespace astraeus {

/// The busybox applets linked into the image's /bin (each a symlink to
/// busybox): the shell and the tools scripts use.
extern const char* const busybox_applets[];

/// Builds `<images_dir>/busybox` from the static busybox at `busybox` when
/// it is not there yet: /bin with busybox and its applets, /etc/passwd
/// (root) and /etc/group (root, and wheel with root, as the seed's `id`
/// prints), and empty /dev, /proc, /sys, /tmp, /root. Built in a temporary
/// folder beside it (one per call: threads may build it at once, and the
/// first rename wins) and renamed into place, so a half-built image is never
/// seen. Returns none when the image exists or was built; ec::invalid_request
/// naming what is missing (no busybox binary: "install busybox-static") or
/// ec::host_read_failure naming the path that could not be written.
caf::error ensure_busybox_image(const std::string& images_dir,
                                const std::string& busybox = "/bin/busybox");

} // namespace astraeus
