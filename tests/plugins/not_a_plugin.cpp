// A shared library without Troupe's entry point (troupe_plugin).
extern "C" int not_a_troupe_plugin() { return 42; }
