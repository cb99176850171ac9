#!/bin/bash
# every case must pass for reward 1; reward.json keeps each case as a component. test.sh
# runs as root; /tests/test_calc.py runs calc.py as `nobody` in a child process, which
# cannot write /logs/verifier (root's), and judges its answers (docs/harbor.md)
cd /tmp && python3 -I /tests/test_calc.py
