// libknot's headers declare C functions without extern "C".
#pragma once

extern "C" {
#include <libknot/libknot.h>
}
