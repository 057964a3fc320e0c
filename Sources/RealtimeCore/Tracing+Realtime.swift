public import Tracing
import Dispatch
import NIOConcurrencyHelpers

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

/// The process's tracer (`InstrumentationSystem.tracer`) for spans of a runtime without a tracer of
/// its own. Looking it up takes a lock and a failing dynamic cast (the default instrument is not a
/// tracer): for a span per message (an emit with an ack, an invocation) that was 3-4 % of the
/// client's CPU while no tracer was bootstrapped. A bootstrapped tracer is kept (the system is
/// bootstrapped once); while none is, the answer is kept for a second, so a tracer bootstrapped
/// after clients started is used within a second.
enum ProcessTracer {
    private struct Cached {
        var tracer: (any Tracer)?
        /// Until when "none bootstrapped" holds (uptime nanoseconds).
        var noneUntil: UInt64 = 0
    }

    private static let cache = NIOLockedValueBox(Cached())
    private static let recheckAfter: UInt64 = 1_000_000_000

    static var current: any Tracer {
        let now = DispatchTime.now().uptimeNanoseconds
        let cached = cache.withLockedValue { cached -> (any Tracer)?? in
            if let tracer = cached.tracer { return .some(tracer) }
            return now < cached.noneUntil ? .some(nil) : nil
        }
        switch cached {
        case .some(let tracer?): return tracer
        case .some(nil): return NoOpTracer()
        case nil: break
        }
        let tracer = InstrumentationSystem.tracer
        let isNoOp = ObjectIdentifier(type(of: tracer)) == ObjectIdentifier(NoOpTracer.self)
        cache.withLockedValue { cached in
            if isNoOp { cached.noneUntil = now + recheckAfter } else { cached.tracer = tracer }
        }
        return tracer
    }
}
