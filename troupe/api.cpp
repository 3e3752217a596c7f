// libtroupe.so's own translation unit: every public header compiles on its
// own, and the library has a source of its own besides the layers it holds.
#include "troupe/troupe.hpp"
