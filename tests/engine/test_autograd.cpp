// tests/engine/test_autograd.cpp — the define-by-run tape (engine/autograd.h):
// gradient accumulation where paths meet, across backward calls, no-grad
// mode, release of saved tensors, detach and cut paths, and the errors.
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/autograd.h"
#include "ops/ops.h"

using namespace ember;

namespace {
using ember::testing::expect_error;

Tensor leaf(const std::vector<double>& v, const Shape& s, DType dt = DType::f64) {
  Tensor t = Tensor::from_vector(v, s, dt);
  t.set_requires_grad(true);
  return t;
}

std::vector<double> grad_of(const Tensor& t) {
  REQUIRE_MESSAGE(t.grad().defined(), "no gradient on ", t.str());
  return t.grad().to_double_vector();
}


}  // namespace

TEST_CASE("autograd: an input used twice by one op gets both gradients: add(x, x)") {
  Tensor x = leaf({1, -2, 3}, {3});
  Tensor y = ops::add(x, x);
  y.backward(Tensor::from_vector({1, 10, 100}, {3}, DType::f64));
  CHECK(grad_of(x) == std::vector<double>{2, 20, 200});
}

TEST_CASE("autograd: a diamond x -> a, b -> add sums both paths") {
  Tensor x = leaf({1, 2}, {2});
  Tensor a = ops::scale(x, 2.0), b = ops::scale(x, 3.0);
  ops::sum(ops::add(a, b)).backward();
  CHECK(grad_of(x) == std::vector<double>{5, 5});
}

TEST_CASE("autograd: a non-leaf used twice accumulates before its node runs") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor h = ops::scale(x, 2.0);                      // non-leaf
  Tensor y = ops::add(ops::scale(h, 5.0), ops::relu(h));  // h feeds two ops
  ops::sum(y).backward();
  // d/dx = 2 * (5 + 1) where h > 0
  CHECK(grad_of(x) == std::vector<double>{12, 12, 12});
}

TEST_CASE("autograd: a deeper diamond with uneven path lengths") {
  // x -> a = 2x -> b = 3a -> c = a + b -> d = c + x ;  dd/dx = 2 + 6 + 1 = 9
  Tensor x = leaf({0.5, -1.5}, {2});
  Tensor a = ops::scale(x, 2.0);
  Tensor b = ops::scale(a, 3.0);
  Tensor d = ops::add(ops::add(a, b), x);
  d.backward(Tensor::from_vector({1, -2}, {2}, DType::f64));
  CHECK(grad_of(x) == std::vector<double>{9, -18});
}

TEST_CASE("autograd: two backward calls on two graphs accumulate (+=) into .grad") {
  Tensor w = leaf({1, 2}, {2});
  ops::sum(ops::scale(w, 2.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{2, 2});
  ops::sum(ops::scale(w, 3.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{5, 5});
  // Zeroing the gradient (what an optimizer does) starts over.
  Tensor g = w.grad();
  g.zero_();
  ops::sum(ops::scale(w, 7.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{7, 7});
}

TEST_CASE("autograd: a leaf's gradient is its own copy, not the upstream tensor") {
  Tensor x = leaf({1, 2}, {2}), z = leaf({3, 4}, {2});
  Tensor seed = Tensor::from_vector({1, 1}, {2}, DType::f64);
  ops::add(x, z).backward(seed);  // add passes the same gy to both inputs
  REQUIRE(x.grad().defined());
  REQUIRE(z.grad().defined());
  CHECK(x.grad().raw_data() != z.grad().raw_data());
  CHECK(x.grad().raw_data() != seed.raw_data());
  // A second backward accumulates into x.grad; z.grad must not change with it.
  ops::scale(x, 1.0).backward(seed);
  CHECK(grad_of(x) == std::vector<double>{2, 2});
  CHECK(grad_of(z) == std::vector<double>{1, 1});
  // Backward from a leaf itself copies the seed.
  Tensor l = leaf({5}, {1});
  Tensor s2 = Tensor::from_vector({3}, {1}, DType::f64);
  l.backward(s2);
  s2.data<double>()[0] = 100;
  CHECK(grad_of(l) == std::vector<double>{3});
}

TEST_CASE("autograd: a fresh gradient is kept as the leaf's .grad; one sharing storage with the caller's is copied") {
  // scale's backward makes a new tensor that nothing else holds: it becomes x.grad as it is.
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor seed = Tensor::from_vector({1, 1, 1, 1}, {4}, DType::f64);
  ops::reshape(ops::scale(x, 2.0), {4}).backward(seed);
  CHECK(grad_of(x) == std::vector<double>{2, 2, 2, 2});
  // reshape's backward returns a view of the seed, which the caller still holds: x.grad must be a copy.
  Tensor y = leaf({1, 2, 3, 4}, {2, 2});
  ops::reshape(y, {4}).backward(seed);
  seed.data<double>()[0] = 100;
  CHECK(grad_of(y) == std::vector<double>{1, 1, 1, 1});
  CHECK(y.grad().raw_data() != seed.raw_data());
}

TEST_CASE("autograd: backward() of a scalar seeds 1; of a non-scalar it needs a gradient") {
  Tensor x = leaf({1, 2, 3}, {3}, DType::f32);
  ops::sum(x).backward();
  CHECK(grad_of(x) == std::vector<double>{1, 1, 1});
  CHECK(x.grad().dtype() == DType::f32);
  expect_error([&] { ops::scale(x, 2.0).backward(); }, "backward() without a gradient needs a one-element tensor");
  expect_error([&] { ops::scale(x, 2.0).backward(Tensor::zeros({2}, DType::f32)); }, "backward's seed");
  expect_error([&] { ops::scale(x, 2.0).backward(Tensor::zeros({3}, DType::f64)); }, "backward's seed");
}

TEST_CASE("autograd: NoGradGuard records nothing and nests") {
  Tensor x = leaf({1, -1}, {2});
  CHECK(grad_mode_enabled());
  {
    NoGradGuard outer;
    CHECK_FALSE(grad_mode_enabled());
    Tensor y = ops::relu(ops::scale(x, 2.0));
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(y.is_leaf());
    {
      NoGradGuard inner;
      CHECK_FALSE(grad_mode_enabled());
    }
    CHECK_FALSE(grad_mode_enabled());  // the inner guard restores "off", not "on"
    expect_error([&] { y.backward(Tensor::zeros({2}, DType::f64)); }, "does not require grad");
  }
  CHECK(grad_mode_enabled());
  Tensor y = ops::scale(x, 2.0);
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "scale");
}

TEST_CASE("autograd: grad mode is per thread") {
  NoGradGuard guard;
  bool other_thread_enabled = false;
  std::thread t([&] { other_thread_enabled = grad_mode_enabled(); });
  t.join();
  CHECK(other_thread_enabled);
  CHECK_FALSE(grad_mode_enabled());
}

TEST_CASE("autograd: backward twice through the same graph is a clear error") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::sum(ops::relu(x));
  y.backward();
  expect_error([&] { y.backward(); }, "a second time");
  expect_error([&] { y.backward(); }, "saved tensors were freed");
}

TEST_CASE("autograd: saved tensors are freed as soon as their node has run") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = leaf({1, 0, -1, 2, 1, 0}, {2, 3});
  Tensor a = ops::scale(x, 3.0);  // an activation that linear saves
  std::weak_ptr<Storage> a_storage = a.impl_ptr()->storage;
  Tensor y = ops::linear(a, w, Tensor());
  a = Tensor();  // drop our handle: now only linear's node holds a's storage
  CHECK_FALSE(a_storage.expired());
  y.backward(Tensor::from_vector({1, 1, 1, 1}, {2, 2}, DType::f64));
  CHECK(a_storage.expired());  // y (and its node) are still alive, the saved tensor is not
  CHECK(y.grad_fn() != nullptr);
  CHECK(grad_of(x) == std::vector<double>{9, 3, -3, 9, 3, -3});  // 3 * (w0 + w1)

  // relu saves its own output: after backward only y2 itself holds the storage.
  Tensor x2 = leaf({1, -1}, {2});
  Tensor y2 = ops::relu(x2);
  CHECK(y2.impl_ptr()->storage.use_count() == 2);
  y2.backward(Tensor::from_vector({1, 1}, {2}, DType::f64));
  CHECK(y2.impl_ptr()->storage.use_count() == 1);
}

TEST_CASE("autograd: nodes are released (the graph is freed) when the output dies") {
  Tensor x = leaf({1, 2}, {2});
  std::weak_ptr<Node> node;
  {
    Tensor y = ops::relu(ops::scale(x, 2.0));
    node = y.grad_fn();
    CHECK_FALSE(node.expired());
  }
  CHECK(node.expired());  // no cycle between a node and the output it saved
}

TEST_CASE("autograd: detach() cuts the graph and shares storage") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = ops::scale(x, 2.0);
  Tensor d = h.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.raw_data() == h.raw_data());
  Tensor z = leaf({10, 20}, {2});
  ops::sum(ops::add(d, z)).backward();
  CHECK_FALSE(x.grad().defined());  // the path to x was cut
  CHECK(grad_of(z) == std::vector<double>{1, 1});
}

TEST_CASE("autograd: backward on a tensor that does not require grad is an error") {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::f64);  // no requires_grad
  Tensor y = ops::sum(ops::relu(x));
  CHECK_FALSE(y.requires_grad());
  expect_error([&] { y.backward(); }, "backward: the tensor does not require grad");
}

TEST_CASE("autograd: a node that returns no gradient for an input cuts that path") {
  // A custom op with two inputs whose backward only differentiates the second:
  // the node feeding the first input, and the leaf behind it, get nothing.
  Tensor x = leaf({1, 2}, {2}), z = leaf({3, 4}, {2});
  Tensor hx = ops::scale(x, 2.0), hz = ops::scale(z, 5.0);
  Tensor y;
  {
    NoGradGuard g;
    y = ops::add(hx, hz);
  }
  int calls = 0;
  y = record("second_only", y, {&hx, &hz}, [&calls](const Tensor& gy, GradMask needs) {
    ++calls;
    CHECK(needs[0]);
    CHECK(needs[1]);
    return std::vector<Tensor>{Tensor(), gy};
  });
  ops::sum(y).backward();
  CHECK(calls == 1);
  CHECK_FALSE(x.grad().defined());
  CHECK(grad_of(z) == std::vector<double>{5, 5});
}

TEST_CASE("autograd: GradMask says which inputs need a gradient") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = Tensor::from_vector({3, 4}, {2}, DType::f64);  // a constant
  Tensor y;
  {
    NoGradGuard g;
    y = ops::add(c, x);
  }
  GradMask seen;
  y = record("mask", y, {&c, &x}, [&seen](const Tensor& gy, GradMask needs) {
    seen = needs;
    return std::vector<Tensor>{Tensor(), gy};
  });
  ops::sum(y).backward();
  CHECK_FALSE(seen[0]);
  CHECK(seen[1]);
  CHECK(grad_of(x) == std::vector<double>{1, 1});
}

TEST_CASE("autograd: a backward returning the wrong number or shape of gradients is an error") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard g;
    y = ops::scale(x, 1.0);
  }
  y = record("two_grads", y, {&x}, [](const Tensor& gy, GradMask) { return std::vector<Tensor>{gy, gy}; });
  expect_error([&] { ops::sum(y).backward(); }, "'two_grads' returned 2 gradients for 1 inputs");

  Tensor y2;
  {
    NoGradGuard g;
    y2 = ops::scale(x, 1.0);
  }
  y2 = record("bad_shape", y2, {&x}, [](const Tensor&, GradMask) {
    return std::vector<Tensor>{Tensor::zeros({3}, DType::f64)};
  });
  expect_error([&] { ops::sum(y2).backward(); }, "a leaf's gradient");
}

TEST_CASE("autograd: set_requires_grad rules") {
  expect_error([] { Tensor::zeros({2}, DType::i64).set_requires_grad(true); },
               "only floating-point tensors can require grad");
  Tensor x = leaf({1}, {1});
  Tensor y = ops::scale(x, 2.0);
  expect_error([&] { y.set_requires_grad(false); }, "set_requires_grad on a tensor made by an op");
  Tensor z = Tensor::zeros({1}, DType::f32);
  CHECK_FALSE(z.requires_grad());
  z.set_requires_grad(true);
  CHECK(z.requires_grad());
  z.set_requires_grad(false);
  CHECK_FALSE(z.requires_grad());
}

TEST_CASE("autograd: gradients flow through views (reshape/flatten) and casts") {
  Tensor x = leaf({1, -2, 3, -4, 5, -6}, {1, 2, 3}, DType::f32);
  Tensor y = ops::cast(ops::relu(ops::flatten(x)), DType::f64);
  CHECK(y.shape() == Shape{1, 6});
  y.backward(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::f64));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().shape() == Shape{1, 2, 3});
  CHECK(x.grad().to_double_vector() == std::vector<double>{1, 0, 3, 0, 5, 0});
}

TEST_CASE("autograd: a long chain runs without recursion problems") {
  Tensor x = leaf({1}, {1});
  Tensor h = x;
  for (int i = 0; i < 2000; ++i) h = ops::scale(h, 1.0);
  h.backward();
  CHECK(grad_of(x) == std::vector<double>{1});
}
