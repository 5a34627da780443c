"""orchestrator tests"""
