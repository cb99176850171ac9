#!/bin/bash
# every case must pass for reward 1; reward.json keeps each case as a component
cd /tmp && python3 /tests/test_calc.py
