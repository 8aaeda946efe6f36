#include "actors/controller/gpu_history_actor.hpp"

#include <caf/exit_reason.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/cluster_requests.hpp"
#include "messages/error.hpp"
#include "store/store.hpp"

namespace astraeus {

caf::error gpu_history_config::validate() const {
  if (!clock)
    return caf::make_error(ec::invalid_config, "gpu history: no wall clock");
  if (flush_interval <= caf::timespan{0})
    return caf::make_error(ec::invalid_config,
                           "gpu history: the flush interval must be longer than 0");
  return limits.validate();
}

caf::error flush_gpu_history(gpu_history_state& st) {
  if (!st.config.store || st.book.pending_count() == 0) {
    st.book.clear_pending();
    return caf::none;
  }
  auto batch = st.book.pending_changes();
  if (auto err = st.config.store->write(batch, false)) {
    if (!st.write_failing)
      spdlog::error("gpu-history: cannot write {} change(s), kept for the next "
                    "flush: {}",
                    batch.size(), render_error(err));
    st.write_failing = true;
    return err;
  }
  if (st.write_failing)
    spdlog::info("gpu-history: the store takes writes again");
  st.write_failing = false;
  st.book.clear_pending();
  return caf::none;
}

namespace {

using history_ptr = gpu_history_actor::stateful_pointer<gpu_history_state>;

void on_samples(history_ptr self, const v1::GpuSamples& samples) {
  auto& book = self->state.book;
  for (const auto& of : samples.gpus())
    book.add(samples.machine(), of.gpu(), of.pci_address(),
             of.has_index() ? std::optional<uint32_t>{of.index()} : std::nullopt,
             from_sample(of.sample()));
}

v1::Response answer(history_ptr self, const v1::Request& req) {
  if (!req.has_get_gpu_history())
    return error_response(req.id(),
                          caf::make_error(ec::invalid_request,
                                          "the GPU history answers get_gpu_history only"));
  auto history = self->state.book.query(req.get_gpu_history());
  if (!history)
    return error_response(req.id(), history.error());
  v1::Response out;
  out.set_id(req.id());
  *out.mutable_gpu_history() = std::move(*history);
  return out;
}

} // namespace

gpu_history_actor::behavior_type
gpu_history(gpu_history_actor::stateful_pointer<gpu_history_state> self,
            gpu_history_config config) {
  if (auto err = config.validate()) {
    spdlog::error("gpu-history: {}", render_error(err));
    self->quit(err);
    return gpu_history_actor::behavior_type::make_empty_behavior();
  }
  auto& st = self->state;
  st.config = std::move(config);
  st.book = gpu_history_book{st.config.limits};
  if (st.config.store) {
    auto loaded = st.book.load(*st.config.store, st.config.clock->now_unix_ms());
    if (!loaded)
      spdlog::error("gpu-history: cannot load the stored history, starting empty: {}",
                    render_error(loaded.error()));
    else if (*loaded > 0)
      spdlog::info("gpu-history: loaded {} point(s) of {} GPU(s)", *loaded,
                   st.book.gpu_count());
  }
  self->set_exit_handler([self](caf::exit_msg& msg) {
    flush_gpu_history(self->state);
    self->quit(msg.reason);
  });
  self->delayed_send(self, st.config.flush_interval, atom::tick_v);
  return {
    [self](const v1::GpuSamples& samples) { on_samples(self, samples); },
    [self](const v1::Request& req) -> caf::result<v1::Response> {
      return answer(self, req);
    },
    [self](atom::remove, const std::string& machine) {
      self->state.book.forget_machine(machine);
    },
    [self](atom::tick) {
      auto& st = self->state;
      st.book.compact(st.config.clock->now_unix_ms());
      flush_gpu_history(st);
      self->delayed_send(self, st.config.flush_interval, atom::tick_v);
    },
  };
}

} // namespace astraeus
