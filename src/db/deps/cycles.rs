//! Finding the waiting jobs that wait in a cycle, and naming each cycle for the job's `last_error`: a
//! pure graph search over the edges the sweep read, so it is tested without a database.

use std::collections::{BTreeSet, HashMap, VecDeque};

/// The jobs that wait in a cycle, each with one cycle it is on, written `4 -> 7 -> 4` (4 waits for
/// 7, which waits for 4), from the edges (waiting job, job it waits for) between waiting jobs. A job
/// that waits for itself is a cycle of one: `5 -> 5`. Each job's cycle is a shortest one through it.
pub(crate) fn cycles(edges: &[(u64, u64)]) -> Vec<(u64, String)> {
    let mut next: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    for (job, after) in edges {
        next.entry(*job).or_default().insert(*after);
    }
    let mut jobs: Vec<u64> = next.keys().copied().collect();
    jobs.sort_unstable();
    let mut out = Vec::new();
    for start in jobs {
        // Breadth first from `start` until it is reached again: the shortest cycle through it.
        let mut came_from: HashMap<u64, u64> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        let mut closed_by = None;
        while let Some(at) = queue.pop_front() {
            for &n in next.get(&at).into_iter().flatten() {
                if n == start {
                    closed_by = Some(at);
                    break;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(n) {
                    e.insert(at);
                    queue.push_back(n);
                }
            }
            if closed_by.is_some() {
                break;
            }
        }
        let Some(mut at) = closed_by else { continue };
        let mut path = vec![start];
        let mut tail = Vec::new();
        while at != start {
            tail.push(at);
            at = came_from[&at];
        }
        path.extend(tail.into_iter().rev());
        path.push(start);
        let text = path
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" -> ");
        out.push((start, text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_named_by_their_shortest_loop() {
        assert_eq!(
            cycles(&[(4, 7), (7, 4), (8, 4)]),
            [
                (4, "4 -> 7 -> 4".to_string()),
                (7, "7 -> 4 -> 7".to_string())
            ]
        );
        assert_eq!(cycles(&[(5, 5)]), [(5, "5 -> 5".to_string())]);
        assert!(cycles(&[(1, 2), (2, 3)]).is_empty(), "a chain is no cycle");
        let long = cycles(&[(1, 2), (2, 3), (3, 1), (1, 3)]);
        assert_eq!(long[0], (1, "1 -> 3 -> 1".to_string()));
        assert_eq!(long[1], (2, "2 -> 3 -> 1 -> 2".to_string()));
    }
}
