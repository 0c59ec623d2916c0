// Strong ids for graph values and nodes: an index that cannot be mixed up with another kind of index.
#pragma once
#include <compare>
#include <cstdint>
#include <functional>

namespace braid {

template <typename Tag>
struct Id {
  int32_t v = -1;
  constexpr Id() = default;
  constexpr explicit Id(int32_t x) : v(x) {}
  constexpr bool valid() const { return v >= 0; }
  constexpr size_t idx() const { return static_cast<size_t>(v); }
  auto operator<=>(const Id&) const = default;
};

using ValueId = Id<struct ValueTag>;
using NodeId = Id<struct NodeTag>;
inline constexpr ValueId kNoValue{};

}  // namespace braid

template <typename Tag>
struct std::hash<braid::Id<Tag>> {
  size_t operator()(const braid::Id<Tag>& id) const { return std::hash<int32_t>()(id.v); }
};
