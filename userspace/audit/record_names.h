// The names a kernel record's numbers are written as, shared by record.cc's
// nlohmann records and line_encoder.cc's fast lines so the two cannot drift
// (a verdict added to one and not the other is a line that differs).
#pragma once

#include <cstdint>

namespace egressd::audit {

const char* KindName(uint8_t kind);      // "connect", "send", "backstop"
const char* ActionName(uint8_t action);  // "pass", "reject", "drop"
const char* VerdictName(uint8_t action); // "allow", "deny", "would-deny"
const char* L4Name(uint8_t proto);       // Hubble's l4 key ("TCP"); nullptr: none
}  // namespace egressd::audit
