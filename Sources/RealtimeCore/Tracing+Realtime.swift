package import Tracing
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
    private static let cache = TracerLookupCache()

    static var current: any Tracer {
        cache.tracer(now: DispatchTime.now().uptimeNanoseconds) { InstrumentationSystem.tracer }
    }
}

/// The rule ``ProcessTracer`` follows, apart from the process-wide system so that tests can drive
/// it: a tracer found is kept; "none" (a `NoOpTracer`) is believed for `recheckAfter` nanoseconds.
package final class TracerLookupCache: Sendable {
    private struct Cached {
        var tracer: (any Tracer)?
        /// Until when "none bootstrapped" holds (nanoseconds on the caller's clock); nil before
        /// the first lookup.
        var noneUntil: UInt64?
    }

    private let cache = NIOLockedValueBox(Cached())
    private let recheckAfter: UInt64

    package init(recheckAfter: UInt64 = 1_000_000_000) {
        self.recheckAfter = recheckAfter
    }

    /// The tracer, from `lookup` when no answer is kept for `now`.
    package func tracer(now: UInt64, lookup: () -> any Tracer) -> any Tracer {
        let cached = cache.withLockedValue { cached -> (any Tracer)?? in
            if let tracer = cached.tracer { return .some(tracer) }
            if let until = cached.noneUntil, now < until { return .some(nil) }
            return nil
        }
        switch cached {
        case .some(let tracer?): return tracer
        case .some(nil): return NoOpTracer()
        case nil: break
        }
        let tracer = lookup()
        let isNoOp = ObjectIdentifier(type(of: tracer)) == ObjectIdentifier(NoOpTracer.self)
        cache.withLockedValue { cached in
            if isNoOp { cached.noneUntil = now &+ recheckAfter } else { cached.tracer = tracer }
        }
        return tracer
    }
}

extension Span {
    /// Runs `operation` with the span's context as the task's `ServiceContext.current`. A no-op span
    /// (no tracer configured) carries the context it was started in, so nothing is bound: around a
    /// connection's whole life a binding keeps a task-local record and its frames on the
    /// connection's task (one slab of an idle connection's memory).
    package func withContextBound<T>(
        isolation: isolated (any Actor)? = #isolation, _ operation: () async throws -> T
    ) async rethrows -> T {
        if !bindsContext { return try await operation() }
        return try await ServiceContext.withValue(context, operation: operation)
    }

    /// Whether ``withContextBound(isolation:_:)`` binds anything (false for a no-op span). A caller
    /// whose operation lives as long as a connection calls it directly when false: the closure
    /// passed to `withContextBound` is one more frame on the connection's task.
    package var bindsContext: Bool { !(self is NoOpTracer.NoOpSpan) }
}
