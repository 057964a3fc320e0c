public import NIOCore

/// A task executor that runs jobs on one NIO event loop.
///
/// Latency-sensitive code can run on a connection's event loop too: give the client a runtime whose
/// `eventLoopGroup` is one loop (`RealtimeRuntime(eventLoopGroup: loop)`) and call it inside
/// `withTaskExecutorPreference(EventLoopTaskExecutor(loop)) { ... }`. A sequential call then
/// writes and is resumed on the socket's thread, without waking a thread of the concurrency pool
/// (measured in Docs/Benchmarks.md, "Outbound, 1,000 in flight"). Such code must not block.
///
/// A connection's reader and writer tasks that prefer the event loop of their channel run on the
/// thread that does the socket I/O: a frame read there resumes its reader without waking another
/// thread, and a write from there reaches the channel without a hop. On a 2-core machine each avoided
/// hop is a context switch saved per message.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
public final class EventLoopTaskExecutor: TaskExecutor {
    /// The event loop the jobs run on.
    public let eventLoop: any EventLoop

    /// Makes an executor that runs its jobs on `eventLoop`.
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Runs `job` on the event loop.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}

/// Runs `operation`, and the child tasks it starts, preferring `eventLoop`'s thread (where the
/// platform has task executors; elsewhere the default executor runs it).
///
/// Code run this way must not block: it shares the thread with every channel of that event loop.
package func withEventLoopPreference<T: Sendable>(
    _ eventLoop: any EventLoop,
    isolation: isolated (any Actor)? = #isolation,
    _ operation: () async throws -> T
) async throws -> T {
    if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *) {
        return try await withTaskExecutorPreference(EventLoopTaskExecutor(eventLoop), isolation: isolation, operation: operation)
    }
    return try await operation()
}
