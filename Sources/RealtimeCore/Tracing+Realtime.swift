public import Tracing

extension RealtimeRuntime {
    /// Starts a span of a client's (`realtime.connect`, `realtime.invoke`...) on the runtime's tracer,
    /// with the `realtime.protocol` and `realtime.client` attributes. The caller ends it.
    package func startClientSpan(_ name: String, protocol protocolName: String, client: String, context: ServiceContext? = nil) -> any Span {
        let tracer = activeTracer
        let parent = context ?? ServiceContext.current ?? .topLevel
        // No tracer configured (the default): the span records nothing, so its attributes are not
        // built (an emit with an ack starts one; this was 4 % of its CPU).
        if Self.isNoOp(tracer) { return NoOpTracer.NoOpSpan(context: parent) }
        let span = tracer.startSpan(name, context: parent, ofKind: .client)
        span.attributes["realtime.protocol"] = protocolName
        span.attributes["realtime.client"] = client
        return span
    }

    /// ``startClientSpan(_:protocol:client:context:)`` for a span per message (an emit with an ack,
    /// an invocation): nil when no tracer is configured, so the caller builds no attributes and the
    /// task's context is not read.
    package func startMessageSpan(_ name: String, protocol protocolName: String, client: @autoclosure () -> String) -> (any Span)? {
        let tracer = activeTracer
        if Self.isNoOp(tracer) { return nil }
        let span = tracer.startSpan(name, context: ServiceContext.current ?? .topLevel, ofKind: .client)
        span.attributes["realtime.protocol"] = protocolName
        span.attributes["realtime.client"] = client()
        return span
    }

    /// Whether `tracer` is the no-op one (a type comparison: a dynamic cast was most of the check's cost).
    private static func isNoOp(_ tracer: any Tracer) -> Bool {
        ObjectIdentifier(type(of: tracer)) == ObjectIdentifier(NoOpTracer.self)
    }
}

extension Span {
    /// Records `error` as the span's failure.
    package func fail(_ error: any Error) {
        recordError(error)
        setStatus(SpanStatus(code: .error))
    }
}
