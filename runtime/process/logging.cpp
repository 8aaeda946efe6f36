#include "runtime/process/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "messages/error.hpp"

namespace astraeus {

caf::error setup_logging(const std::string& process, const std::string& level,
                         const std::string& file) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    return caf::make_error(ec::invalid_config,
                           "log.level: '" + level
                             + "' is not one of trace, debug, info, warn, "
                               "error, off");
  std::shared_ptr<spdlog::logger> logger;
  try {
    if (file.empty())
      logger = spdlog::stderr_color_mt(process);
    else
      logger = spdlog::basic_logger_mt(process, file);
  } catch (const spdlog::spdlog_ex& ex) {
    return caf::make_error(ec::invalid_config,
                           "log.file: cannot open '" + file + "': " + ex.what());
  }
  logger->set_level(lvl);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%-5l%$ [%n] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return caf::none;
}

} // namespace astraeus
