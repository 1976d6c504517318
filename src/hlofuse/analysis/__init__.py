"""Analyses of a module that passes, backends and tools share (they never keep their own copies):

    kernels.py   kernel accounting: what is a kernel, kernels per execution / iteration / run
"""
