// Pinocchio's own C++ loop, one thread: each algorithm over a batch of states, the way a
// C++ user of Pinocchio runs a batch. Built and run by benchmarks/dynamics.py:
//   pinocchio_loop MODEL STATES N REPEATS
// MODEL describes the model that Pinocchio's Python bindings built from the URDF, one joint
// a line (benchmarks/dynamics.py writes it: the pip wheels ship no headers for the C++
// URDF parser): its type (FreeFlyer, RX ... PZ, or Revolute / Prismatic about an axis), parent, placement (translation, rotation row by row), axis,
// and the inertia it carries (mass, centre of mass, rotational inertia about it, row by
// row). STATES holds N states (q, v, a, tau in Pinocchio's layout, float64, one after the other);
// prints one line per algorithm: its name and the median time of one call in nanoseconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "pinocchio/algorithm/aba-derivatives.hpp"
#include "pinocchio/algorithm/aba.hpp"
#include "pinocchio/algorithm/crba.hpp"
#include "pinocchio/algorithm/rnea-derivatives.hpp"
#include "pinocchio/algorithm/rnea.hpp"
#include "pinocchio/multibody.hpp"

using Vector = Eigen::VectorXd;

template <typename F>
double median_ns(int n, int repeats, F call) {
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) call(i);
    auto stop = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::nano>(stop - start).count() / n);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL STATES N REPEATS\n", argv[0]);
    return 2;
  }
  pinocchio::Model model;
  std::ifstream description(argv[1]);
  std::string type;
  while (description >> type) {
    int parent;
    double t[3], r[9], axis[3], mass, c[3], inertia[9];
    description >> parent;
    for (double* x : {t, r, axis}) for (int k = 0; k < (x == r ? 9 : 3); ++k) description >> x[k];
    description >> mass >> c[0] >> c[1] >> c[2];
    for (double& x : inertia) description >> x;
    const Eigen::Matrix3d rotation = Eigen::Map<Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(r);
    const Eigen::Vector3d translation = Eigen::Map<Eigen::Vector3d>(t);
    const pinocchio::SE3 placement(rotation, translation);
    Eigen::Vector3d direction = Eigen::Map<Eigen::Vector3d>(axis);
    static const std::map<std::string, pinocchio::JointModel> aligned = {
        {"FreeFlyer", pinocchio::JointModelFreeFlyer()}, {"RX", pinocchio::JointModelRX()},
        {"RY", pinocchio::JointModelRY()}, {"RZ", pinocchio::JointModelRZ()},
        {"PX", pinocchio::JointModelPX()}, {"PY", pinocchio::JointModelPY()},
        {"PZ", pinocchio::JointModelPZ()}};
    pinocchio::JointModel joint;
    if (aligned.count(type))
      joint = aligned.at(type);
    else if (type == "Revolute")
      joint = pinocchio::JointModelRevoluteUnaligned(direction);
    else if (type == "Prismatic")
      joint = pinocchio::JointModelPrismaticUnaligned(direction);
    else {
      std::fprintf(stderr, "joint type %s: not in this loop\n", type.c_str());
      return 2;
    }
    const pinocchio::JointIndex id = model.addJoint(parent, joint, placement, type);
    const Eigen::Matrix3d rotational = Eigen::Map<Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(inertia);
    const Eigen::Vector3d centre = Eigen::Map<Eigen::Vector3d>(c);
    model.appendBodyToJoint(id, pinocchio::Inertia(mass, centre, rotational));
  }
  pinocchio::Data data(model);
  const int n = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
  std::vector<Vector> q(n, Vector(model.nq)), v(n, Vector(model.nv)), a(n, Vector(model.nv)),
      tau(n, Vector(model.nv));
  std::ifstream file(argv[2], std::ios::binary);
  for (int i = 0; i < n; ++i) {
    file.read(reinterpret_cast<char*>(q[i].data()), sizeof(double) * model.nq);
    file.read(reinterpret_cast<char*>(v[i].data()), sizeof(double) * model.nv);
    file.read(reinterpret_cast<char*>(a[i].data()), sizeof(double) * model.nv);
    file.read(reinterpret_cast<char*>(tau[i].data()), sizeof(double) * model.nv);
  }
  if (!file) {
    std::fprintf(stderr, "short states file\n");
    return 2;
  }
  double sink = 0;
  std::printf("rnea %.1f\n", median_ns(n, repeats, [&](int i) {
    sink += pinocchio::rnea(model, data, q[i], v[i], a[i])[0];
  }));
  std::printf("rnea_derivatives %.1f\n", median_ns(n, repeats, [&](int i) {
    pinocchio::computeRNEADerivatives(model, data, q[i], v[i], a[i]);
    sink += data.dtau_dq(0, 0);
  }));
  std::printf("aba %.1f\n", median_ns(n, repeats, [&](int i) {
    sink += pinocchio::aba(model, data, q[i], v[i], tau[i])[0];
  }));
  std::printf("crba %.1f\n", median_ns(n, repeats, [&](int i) {
    sink += pinocchio::crba(model, data, q[i])(0, 0);
  }));
  std::printf("aba_derivatives %.1f\n", median_ns(n, repeats, [&](int i) {
    pinocchio::computeABADerivatives(model, data, q[i], v[i], tau[i]);
    sink += data.ddq_dq(0, 0);
  }));
  std::fprintf(stderr, "checksum %g\n", sink);
  return 0;
}
