"""The write path: options, transactions, the Spark write client and the executor-side file handles.

(Named `writer` so that `hudilite.write` stays the public function.)"""
