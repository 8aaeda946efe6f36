#pragma once
/// @file
/// What a run's spec puts into a worker's filesystem besides its image
/// (shared/seeds/inside-a-worker.md, "Filesystem"): `volumes[]` (EmptyDir:
/// an empty folder under the worker's folder, removed with it; Bind: a
/// machine path, read-only unless `mode: ReadWrite`), `configs[].mounts[]`
/// (literal files, read-only) and `astra run --code` (the packed code,
/// unpacked at /workspace). Also the user a run asks for
/// (`task_template.user`) and the HOME it gets.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/workers/oci_bundle.hpp"

namespace astraeus {

/// Where `astra run --code` puts the code in a container (the working
/// directory), and where the packed file is kept.
inline constexpr const char* container_code_dir = "/workspace";
inline constexpr const char* container_code_file = "/astra/code.tgz.b64";

/// The folders and files a worker's volumes, configs and code need, made
/// under `worker_dir` (`<worker_dir>/volumes/<name>`, `<worker_dir>/configs/
/// <i>-<j>`, `<worker_dir>/code`), owned by `uid`:`gid` where the worker
/// writes; returns the bind mounts a container gets for them (EmptyDir and
/// code read-write; Bind read-only unless `read_write`; configs read-only).
/// The code is unpacked with `tar` (a gzip'd tar; an entry leaving the
/// folder is refused). Errors: ec::store_failure naming the folder or step;
/// ec::invalid_request for a Bind path that is not there.
caf::expected<std::vector<oci_mount>>
prepare_worker_mounts(const v1::RunSpec& spec, const std::string& worker_dir,
                      uint32_t uid, uint32_t gid);

/// For a host process (the process runtime): the run's code unpacked into
/// `<worker_dir>/code`, its working directory; "" when the run has no code.
caf::expected<std::string> prepare_host_code(const v1::RunSpec& spec,
                                             const std::string& worker_dir);

/// Removes what `prepare_worker_mounts` made under `worker_dir` (EmptyDir
/// volumes, config files, the code): they go with the worker's container.
void remove_worker_mounts(const std::string& worker_dir);

/// The user a container runs as (seed, "User"): the spec's
/// `task_template.user` when given, else the image's USER, else root.
std::string worker_user(const v1::RunSpec& spec, const oci_image& image);

/// The home of `uid` in the root filesystem's /etc/passwd, or "/root".
std::string passwd_home(const std::string& rootfs, uint32_t uid);

} // namespace astraeus
