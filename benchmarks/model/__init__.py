"""The model files: conversion, quantization, the importance matrix, the 2B-shape random checkpoint."""
