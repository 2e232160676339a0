"""The public API is pinned: names exported by ``airflow_sqlqueue.transport``, the façade's and the hook's methods
and the parameters of every operator, sensor and trigger. A change here is a change for users: make it on purpose,
update this file in the same commit and say so in the changelog of the release.
"""

from __future__ import annotations

import inspect

import airflow_sqlqueue.operators as operators
import airflow_sqlqueue.transport as transport
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, SqlQueueTrigger

PINNED = {'SqlQueueHook': {'afor_conn_id': ['conn_id'],
                  'close': [],
                  'for_connection': ['connection'],
                  'get_conn': [],
                  'get_transport': []},
 'SqlQueueMessageTrigger': ['conn_id',
                            'queue_name',
                            'batch_size',
                            'poll_interval',
                            'error_queue',
                            'max_body_bytes',
                            'event_interval',
                            'max_event_bytes',
                            'max_poll_interval'],
 'SqlQueueSensor': ['queue_name',
                    'sqlqueue_conn_id',
                    'min_messages',
                    'deferrable',
                    'poll_interval',
                    'max_poll_interval'],
 'SqlQueueTransport': {'address': ['queue'],
                       'browse': ['queue', 'after_seq', 'limit'],
                       'check': ['queue', 'repair'],
                       'check_concurrency': ['concurrency', 'what', 'ask'],
                       'claim': ['queue', 'max_messages', 'take'],
                       'close': [],
                       'count': ['queue'],
                       'create_queue': ['queue', 'delayed', 'notify'],
                       'create_queues': ['queues', 'delayed', 'notify'],
                       'create_subscription_table': [],
                       'ddl': ['queues', 'delayed', 'notify'],
                       'delete_messages': ['queue', 'ids'],
                       'delete_positions': ['queue', 'positions'],
                       'disable_notifications': ['queue'],
                       'discover': [],
                       'drain': ['queue',
                                 'sink',
                                 'max_messages',
                                 'max_duration',
                                 'batch_size',
                                 'concurrency',
                                 'breaker',
                                 'partition'],
                       'enable_notifications': ['queue'],
                       'exists': ['queue'],
                       'explain': ['exc', 'what'],
                       'failed_groups': ['queue'],
                       'failed_page': ['queue', 'after_seq', 'limit', 'where'],
                       'from_url': ['url'],
                       'move_due_delayed': ['endpoint', 'batch_size'],
                       'name': ['queue'],
                       'oldest_age': ['queue'],
                       'peek': ['queue'],
                       'plan_partitions': ['queue',
                                           'partitions',
                                           'messages_per_partition',
                                           'max_partitions',
                                           'open_end'],
                       'process': ['queue',
                                   'handler',
                                   'mode',
                                   'max_messages',
                                   'max_duration',
                                   'batch_size',
                                   'concurrency',
                                   'immediate_retries',
                                   'delayed_retries',
                                   'delayed_retry_delay',
                                   'stop_when_empty'],
                       'publish': ['event_type', 'message', 'base_types'],
                       'pump': ['queue',
                                'handler',
                                'mode',
                                'batch_size',
                                'concurrency',
                                'immediate_retries',
                                'delayed_retries',
                                'delayed_retry_delay',
                                'breaker',
                                'failures'],
                       'purge_expired': ['queue', 'batch_size', 'progress'],
                       'receive': ['queue', 'max_messages'],
                       'receiving': ['queue', 'max_messages'],
                       'retry_errors': ['error_queue', 'select', 'max_messages'],
                       'retry_positions': ['error_queue', 'positions', 'allowed'],
                       'run': ['work', 'what', 'read_only'],
                       'send': ['queue', 'message', 'endpoint', 'cursor'],
                       'send_many': ['queue', 'messages', 'endpoint', 'cursor'],
                       'sent_position': ['queue'],
                       'subscribe': ['queue', 'topics', 'endpoint'],
                       'subscriptions': [],
                       'unsubscribe': ['endpoint', 'topics'],
                       'wakeups': ['queue', 'poll_interval', 'max_poll_interval', 'push'],
                       'wire_address': ['queue']},
 'SqlQueueTrigger': ['conn_id', 'queue', 'min_messages', 'poll_interval', 'max_poll_interval'],
 'operators': {'SqlQueueBatchRetryOperator': ['batch_size',
                                              'ramp_start',
                                              'rate_per_second',
                                              'max_messages',
                                              'redirects',
                                              'allowed_queues',
                                              'failed_q',
                                              'exception_type',
                                              'message_type'],
               'SqlQueueCheckSchemaOperator': ['queues', 'repair', 'fail_on_findings'],
               'SqlQueueCreateQueuesOperator': ['queues', 'delayed', 'notify'],
               'SqlQueueDrainOperator': ['queue_name',
                                         'sqlqueue_conn_id',
                                         'max_messages',
                                         'max_duration',
                                         'max_concurrency',
                                         'batch_size',
                                         'handler',
                                         'mode',
                                         'immediate_retries',
                                         'output_path',
                                         'error_queue'],
               'SqlQueuePartitionDrainOperator': ['partition', 'output_path', 'max_messages', 'sqlqueue_conn_id'],
               'SqlQueuePlanPartitionsOperator': ['queue_name',
                                                  'partitions',
                                                  'messages_per_partition',
                                                  'max_partitions',
                                                  'open_end'],
               'SqlQueuePublishOperator': ['event_type',
                                           'body',
                                           'headers',
                                           'base_types',
                                           'content_type',
                                           'endpoint',
                                           'subscription_table',
                                           'time_to_be_received',
                                           'sqlqueue_conn_id'],
               'SqlQueuePurgeExpiredOperator': ['queues', 'batch_size'],
               'SqlQueueRetryErrorsOperator': ['failed_q', 'exception_type', 'max_messages'],
               'SqlQueueSendOperator': ['queue_name',
                                        'messages',
                                        'body',
                                        'headers',
                                        'sqlqueue_conn_id',
                                        'time_to_be_received',
                                        'delay']},
 'transport': ['CircuitBreakerOpenError',
               'Claim',
               'CrossDatabaseTransactionError',
               'DatabaseConnectionError',
               'DrainSummary',
               'Finding',
               'ForwardRefusedError',
               'HandlerContext',
               'InvalidAddressError',
               'InvalidMessageError',
               'OutgoingMessage',
               'Partition',
               'PermissionDeniedError',
               'ProcessSummary',
               'PublishResult',
               'QueueAddress',
               'QueueNotFoundError',
               'RawRow',
               'ReceiveStats',
               'ReceivedBatch',
               'ReceivedMessage',
               'SqlQueueError',
               'SqlQueueTransport',
               'Subscription',
               'TransactionMode',
               'UnsupportedConnectionError',
               'ddl_script',
               'get_dialect']}


def _params(function) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p not in ("self", "kwargs", "cls")]


def _methods(cls) -> dict[str, list[str]]:
    public = [n for n in sorted(vars(cls)) if not n.startswith("_") and callable(getattr(cls, n))]
    return {n: _params(getattr(cls, n)) for n in public}


def test_transport_exports_exactly_the_pinned_names():
    assert sorted(transport.__all__) == PINNED["transport"]
    assert all(hasattr(transport, name) for name in transport.__all__)


def test_facade_and_hook_methods_are_pinned():
    assert _methods(transport.SqlQueueTransport) == PINNED["SqlQueueTransport"]
    assert _methods(SqlQueueHook) == PINNED["SqlQueueHook"]


def test_operator_sensor_and_trigger_parameters_are_pinned():
    found = {n: _params(getattr(operators, n).__init__) for n in operators.__all__
             if inspect.isclass(getattr(operators, n))}
    assert found == PINNED["operators"]
    assert _params(SqlQueueSensor.__init__) == PINNED["SqlQueueSensor"]
    assert _params(SqlQueueTrigger.__init__) == PINNED["SqlQueueTrigger"]
    assert _params(SqlQueueMessageTrigger.__init__) == PINNED["SqlQueueMessageTrigger"]
