select * from strategy_summary
