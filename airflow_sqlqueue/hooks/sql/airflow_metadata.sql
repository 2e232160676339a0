-- connection_by_id --
-- One Airflow connection by its id, read from the metadata database's connection table (the command line's
-- fast path for --conn-id; password and extra may be Fernet-encrypted, as the is_*encrypted flags say).
SELECT conn_type, host, schema, login, password, port, extra, is_encrypted, is_extra_encrypted
FROM connection
WHERE conn_id = %(conn_id)s
