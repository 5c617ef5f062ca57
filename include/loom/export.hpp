// What libloom exports: the public API only (everything else is built with hidden visibility).
#pragma once

#define LOOM_API __attribute__((visibility("default")))
// The inside of a public class (its Impl): hidden even though the class is exported.
#define LOOM_INTERNAL __attribute__((visibility("hidden")))
