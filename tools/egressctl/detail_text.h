// `egressctl sandbox get`'s text for GET /v1/sandboxes/{id}'s detail: what
// the sandbox takes of its caps, its counters, its learned addresses.
#pragma once

#include <nlohmann/json.hpp>

namespace egressd::cli {

void PrintSandboxDetail(const nlohmann::json& s);

}  // namespace egressd::cli
