#!/bin/bash
sed -i 's/return a - b/return a + b/' /workspace/calc.py
