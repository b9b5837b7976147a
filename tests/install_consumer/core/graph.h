// A user's own header that happens to share a name with one of Spire's
// (core/graph.h). The consumer puts its folder on the include path: Spire's
// installed headers must never pick this file up.
#error "Spire's installed headers included the user's core/graph.h instead of their own"
