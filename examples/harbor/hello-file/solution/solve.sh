#!/bin/bash
echo 'Hello, world!' > /workspace/hello.txt
