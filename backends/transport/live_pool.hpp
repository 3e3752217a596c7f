// The operations a transport has in flight, without an allocation per
// operation: nodes live in a deque (they never move, so UCX may hold a
// pointer to one), the live ones are linked in a list for iteration, and a
// released node is handed out again.
//
// LP-1  A node is live from acquire() until release() or abandon(); only
//       live nodes are visited by for_each, counted by size().
// LP-2  A released node is handed out again (most recently released first);
//       an abandoned one never is, and stays valid until the pool goes (for a
//       pointer someone else still holds and may never give back).
#pragma once

#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

namespace troupe {

template <class T>
class LivePool {
 public:
  class Node {
   public:
    T value;
    bool live() const { return live_; }

   private:
    friend LivePool;
    Node* prev_ = nullptr;
    Node* next_ = nullptr;
    bool live_ = false;
  };

  LivePool() = default;
  LivePool(const LivePool&) = delete;
  LivePool& operator=(const LivePool&) = delete;

  Node& acquire(T value) {
    Node* n;
    if (free_.empty()) {
      n = &storage_.emplace_back();
    } else {
      n = free_.back();
      free_.pop_back();
    }
    n->value = std::move(value);
    link(*n);
    return *n;
  }
  /// Back to the free list (LP-2); its value is reset now, so what it owned goes.
  void release(Node& n) {
    unlink(n);
    n.value = T{};
    free_.push_back(&n);
  }
  /// Out of the live list for good (LP-2).
  void abandon(Node& n) { unlink(n); }

  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  /// Visits every live node, oldest first; `f` may release or abandon the node it is given.
  template <class F>
  void for_each(F&& f) {
    for (Node* n = head_; n;) {
      Node* next = n->next_;
      f(*n);
      n = next;
    }
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Node* n = head_; n; n = n->next_) f(*n);
  }

 private:
  void link(Node& n) {
    n.live_ = true;
    n.prev_ = tail_;
    n.next_ = nullptr;
    (tail_ ? tail_->next_ : head_) = &n;
    tail_ = &n;
    ++count_;
  }
  void unlink(Node& n) {
    if (!n.live_) return;
    (n.prev_ ? n.prev_->next_ : head_) = n.next_;
    (n.next_ ? n.next_->prev_ : tail_) = n.prev_;
    n.prev_ = n.next_ = nullptr;
    n.live_ = false;
    --count_;
  }

  std::deque<Node> storage_;
  std::vector<Node*> free_;
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace troupe
