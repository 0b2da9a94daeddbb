"""Unified memory: who dies first (victim_order), what a training job will take (estimate), and whether
serving and training fit the node (planner: the plan types and their arithmetic).

Shared by the roles that declare it: earlyoom and vllm place their processes in victim_order's bands,
role budget builds the node's plan (roles/budget/plan.py), `sparkguard estimate` and `sparkguard plan`
print them. It imports no role and reads no role's settings (tests/unit/test_architecture.py).
"""
