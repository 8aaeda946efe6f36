#pragma once
/// @file
/// How a cluster error reads to a client of the HTTP API, and to `astra -o
/// json`, which prints the API's objects (README, "HTTP API"): its HTTP
/// status, and its code in the seeds' spelling (`NOT_CONNECTED`,
/// `NO_SUCH_MACHINE`; `NOT_FOUND` for a missing run, workspace, validation
/// or token; `ALREADY_EXISTS` for a name in use).

#include <string>

namespace astraeus::v1 {
class Error;
} // namespace astraeus::v1

namespace astraeus {

/// The HTTP status `err` means: 401 unauthenticated, 403 permission_denied,
/// 404 no_such_machine or an invalid_request naming a missing thing ("no run
/// named ..."), 409 not_connected, enrolment used, a failed precondition or
/// a name in use, 410 an expired enrolment, 501 "this controller ...", 504
/// timeout or unreachable, 400 any other invalid_request (a bad value), 500
/// any other code (a store failure, a corrupt record).
int http_status_of(const v1::Error& err);

/// "not_connected" -> "NOT_CONNECTED": upper case, as the seeds spell codes.
std::string api_error_code(const std::string& code);

/// The code the HTTP API answers `err` with: `api_error_code` of its code,
/// but NOT_FOUND for an invalid_request that is a 404 and ALREADY_EXISTS for
/// one that is a 409 (the cluster's requests say invalid_request for both;
/// `http_status_of` tells them apart by the words).
std::string api_error_code(const v1::Error& err);

} // namespace astraeus
