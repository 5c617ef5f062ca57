// Whether a host name or address belongs to this machine.
#pragma once

#include <optional>
#include <string>

namespace loom::base {

// Whether `host` names an address of one of this host's interfaces (loopback included);
// nullopt when the name does not resolve or the interfaces cannot be listed.
std::optional<bool> is_local_address(const std::string& host);

}  // namespace loom::base
