"""Clients of the services every go-plugin gRPC server has besides the plugin's own.

``grpc.health.v1.Health`` (go-plugin's ping), ``plugin.GRPCController`` (graceful shutdown) and
``plugin.GRPCStdio`` (the plugin's stdout/stderr after the handshake). Their messages are built
from descriptors in a private pool (go-plugin's internal/plugin/*.proto and grpc's health.proto,
field for field), so that nothing clashes with another copy of them in the default pool.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_pool = descriptor_pool.DescriptorPool()


def _file(name: str, package: str) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")


def _field(msg: Any, name: str, number: int, ftype: int, type_name: str = "") -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name


def _build() -> None:
    fdp = descriptor_pb2.FieldDescriptorProto
    # go-plugin internal/plugin/grpc_controller.proto and grpc_stdio.proto.
    plugin = _file("atom_go/goplugin.proto", "plugin")
    plugin.message_type.add(name="Empty")
    stdio = plugin.message_type.add(name="StdioData")
    ch = stdio.enum_type.add(name="Channel")
    for i, n in enumerate(("INVALID", "STDOUT", "STDERR")):
        ch.value.add(name=n, number=i)
    _field(stdio, "channel", 1, fdp.TYPE_ENUM, ".plugin.StdioData.Channel")
    _field(stdio, "data", 2, fdp.TYPE_BYTES)
    _pool.Add(plugin)
    # google/protobuf/empty.proto (StreamStdio's request).
    empty = _file("atom_go/empty.proto", "google.protobuf")
    empty.message_type.add(name="Empty")
    _pool.Add(empty)
    # grpc/health/v1/health.proto.
    health = _file("atom_go/health.proto", "grpc.health.v1")
    req = health.message_type.add(name="HealthCheckRequest")
    _field(req, "service", 1, fdp.TYPE_STRING)
    resp = health.message_type.add(name="HealthCheckResponse")
    st = resp.enum_type.add(name="ServingStatus")
    for i, n in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        st.value.add(name=n, number=i)
    _field(resp, "status", 1, fdp.TYPE_ENUM, ".grpc.health.v1.HealthCheckResponse.ServingStatus")
    _pool.Add(health)


_build()


def _cls(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(name))


PluginEmpty = _cls("plugin.Empty")
StdioData = _cls("plugin.StdioData")
ProtobufEmpty = _cls("google.protobuf.Empty")
HealthCheckRequest = _cls("grpc.health.v1.HealthCheckRequest")
HealthCheckResponse = _cls("grpc.health.v1.HealthCheckResponse")


class StdioChannel(enum.IntEnum):
    """plugin.StdioData.Channel."""

    INVALID = 0
    STDOUT = 1
    STDERR = 2


class ServingStatus(enum.IntEnum):
    """grpc.health.v1.HealthCheckResponse.ServingStatus."""

    UNKNOWN = 0
    SERVING = 1
    NOT_SERVING = 2
    SERVICE_UNKNOWN = 3


class GoPluginServices:
    """Stubs of go-plugin's health, controller and stdio services on one channel."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        self._shutdown = channel.unary_unary(
            "/plugin.GRPCController/Shutdown",
            request_serializer=PluginEmpty.SerializeToString,
            response_deserializer=PluginEmpty.FromString,
        )
        self._stdio = channel.unary_stream(
            "/plugin.GRPCStdio/StreamStdio",
            request_serializer=ProtobufEmpty.SerializeToString,
            response_deserializer=StdioData.FromString,
        )

    def health(self, service: str, timeout: float) -> ServingStatus:
        """grpc.health.v1.Health/Check."""
        resp = self._check(HealthCheckRequest(service=service), timeout=timeout)
        return ServingStatus(resp.status)  # type: ignore[attr-defined]

    def shutdown(self, timeout: float) -> None:
        """plugin.GRPCController/Shutdown: the plugin stops serving and exits."""
        self._shutdown(PluginEmpty(), timeout=timeout)

    def open_stdio(self) -> Any:
        """plugin.GRPCStdio/StreamStdio: call once; iterate the returned call (see read_stdio)
        until the plugin closes it, or cancel() it."""
        return self._stdio(ProtobufEmpty())


def read_stdio(call: Any) -> Iterator[tuple[StdioChannel, bytes]]:
    """The (channel, data) items of an open StreamStdio call."""
    for item in call:
        ch = item.channel
        yield (StdioChannel(ch) if ch in (1, 2) else StdioChannel.INVALID), bytes(item.data)
